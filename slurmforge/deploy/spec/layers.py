"""Layered node-set definitions (as CoreWeave's SUNK does).

A node set that lists ``definitions: [a, b, …]`` is built by applying, in order, the built-in
``base`` layer, then each named layer, then the node set's own keys. A layer is a file in the
layers directory (``<name>.yaml``) or another node set (its ``name`` is not inherited); layers may
themselves use ``definitions``. The merge is a deep update:

- mappings recurse;
- lists of strings are united, keeping order, without duplicates;
- lists of mappings are matched by ``name`` (matched entries recurse, the rest are appended);
- node-affinity ``matchExpressions`` are matched by ``key`` and a matched expression is replaced
  whole, so a region layer replaces the region instead of adding a second expression (or a
  second value to the first);
- anything else (scalars, other lists, a change of type) is replaced.

Unknown layers and cycles are errors.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import format_path, read_yaml

BASE = "base"
# What every node set that uses definitions starts from.
BASE_LAYER: dict[str, Any] = {
    "replicas": 1,
    "image": "slurmd",
    "cpus": 1,
    "memory_mb": 1024,
    "features": [],
    "gres": [],
    # the jail SPANK plugin gives each job step a mount namespace and mounts
    "capabilities": ["SYS_ADMIN"],
    "env": {},
    "affinity": {"matchExpressions": []},
}
# Lists of mappings under these keys are matched on "key" and matched entries replaced whole;
# all other lists of mappings are matched on "name" and matched entries merged.
REPLACE_BY_KEY = {"matchExpressions"}


def deep_update(below: Any, above: Any, key: str | None = None) -> Any:
    """``above`` applied onto ``below`` by the rules in the module docstring (inputs untouched)."""
    if isinstance(below, Mapping) and isinstance(above, Mapping):
        out = copy.deepcopy(dict(below))
        for k, v in above.items():
            out[k] = deep_update(out[k], v, k) if k in out else copy.deepcopy(v)
        return out
    if isinstance(below, list) and isinstance(above, list):
        if all(isinstance(x, str) for x in below + above):
            return list(dict.fromkeys(below + above))
        replace = key in REPLACE_BY_KEY
        match = "key" if replace else "name"
        if all(isinstance(x, Mapping) and match in x for x in below + above):
            out = copy.deepcopy(below)
            index = {x[match]: i for i, x in enumerate(out)}
            for item in above:
                if item[match] in index:
                    i = index[item[match]]
                    out[i] = copy.deepcopy(item) if replace else deep_update(out[i], item)
                else:
                    index[item[match]] = len(out)
                    out.append(copy.deepcopy(item))
            return out
    return copy.deepcopy(above)


class Layers:
    """Resolves node sets against the layer files of one directory and each other."""

    def __init__(self, path: Path, nodesets: list[Any], layers_dir: Path | None) -> None:
        self.path = path  # the cluster file, for error messages
        self.nodesets: dict[str, tuple[int, Mapping[str, Any]]] = {}
        for i, raw in enumerate(nodesets):
            if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
                if raw["name"] in self.nodesets:
                    raise ConfigError(
                        f"{path}: nodesets[{i}].name: duplicate node set name {raw['name']!r}"
                    )
                self.nodesets[raw["name"]] = (i, raw)
        self.files: dict[str, Path] = {}
        if layers_dir is not None and layers_dir.is_dir():
            self.files = {p.stem: p for p in sorted(layers_dir.glob("*.yaml"))}
        for name, file in self.files.items():
            if name == BASE:
                raise ConfigError(f"{file}: 'base' is the built-in layer; rename this file")
            if name in self.nodesets:
                i = self.nodesets[name][0]
                raise ConfigError(
                    f"{path}: nodesets[{i}].name: {name!r} is also the layer file {file}; "
                    "rename one of them"
                )
        self._loaded: dict[str, Mapping[str, Any]] = {}
        # node set index → where its keys came from, in the order applied: (file, key path of
        # the mapping in that file, the mapping)
        self.sources: dict[int, list[tuple[Path, tuple[str | int, ...], Mapping[str, Any]]]] = {}

    def known(self) -> list[str]:
        return sorted({BASE, *self.files, *self.nodesets})

    def resolve(self, index: int, raw: Any) -> Any:
        """Node set ``raw`` (``nodesets[index]``) with its definitions applied."""
        if not isinstance(raw, Mapping):
            return raw  # the model reports the wrong type with its path
        name = raw.get("name") if isinstance(raw.get("name"), str) else f"#{index}"
        self.sources[index] = []
        out = self._flatten(raw, self.path, ("nodesets", index), [name], self.sources[index])
        if "elastic" in out and "replicas" not in raw:
            # an elastic set's size is its elastic.max, whatever count a layer (base's 1) gives
            out.pop("replicas", None)
        return out

    def blame(self, loc: tuple[str | int, ...]) -> tuple[Path, tuple[str | int, ...]]:
        """The file and key path that gave the merged node set's value at ``loc`` (a path in
        the cluster file's model, such as ``nodesets[0].cpus``): the last layer that set it."""
        if len(loc) > 2 and loc[0] == "nodesets" and loc[1] in self.sources:
            for file, where, raw in reversed(self.sources[loc[1]]):  # type: ignore[index]
                if _has_path(raw, tuple(p for p in loc[2:] if p != "[key]")):
                    return file, (*where, *loc[2:])
        return self.path, loc

    def _flatten(
        self,
        raw: Mapping[str, Any],
        file: Path,
        loc: tuple[str | int, ...],
        stack: list[str],
        sources: list[tuple[Path, tuple[str | int, ...], Mapping[str, Any]]],
    ) -> dict[str, Any]:
        own = {k: v for k, v in raw.items() if k != "definitions"}
        definitions = raw.get("definitions")
        if definitions is None:
            sources.append((file, loc, own))
            return own
        where = f"{file}: {format_path((*loc, 'definitions'))}"
        if not isinstance(definitions, list) or not all(isinstance(d, str) for d in definitions):
            raise ConfigError(f"{where}: expected a list of layer names, got {quote(definitions)}")
        merged: dict[str, Any] = copy.deepcopy(BASE_LAYER)
        for i, layer in enumerate(definitions):
            if layer in stack:
                cycle = " → ".join([*stack[stack.index(layer) :], layer])
                raise ConfigError(f"{where}[{i}]: layer cycle {cycle}")
            merged = deep_update(merged, self._layer(layer, f"{where}[{i}]", stack, sources))
        sources.append((file, loc, own))
        return deep_update(merged, own)

    def _layer(
        self,
        name: str,
        where: str,
        stack: list[str],
        sources: list[tuple[Path, tuple[str | int, ...], Mapping[str, Any]]],
    ) -> dict[str, Any]:
        if name == BASE:
            return copy.deepcopy(BASE_LAYER)
        if name in self.nodesets:
            i, raw = self.nodesets[name]
            out = self._flatten(raw, self.path, ("nodesets", i), [*stack, name], sources)
            out.pop("name", None)
            return out
        if name in self.files:
            file = self.files[name]
            raw = self._loaded.get(name) or read_yaml(file)
            self._loaded[name] = raw
            if "name" in raw:
                raise ConfigError(f"{file}: name: a layer file is named by its file name")
            return self._flatten(raw, file, (), [*stack, name], sources)
        raise ConfigError(
            f"{where}: unknown layer {name!r}; expected one of {', '.join(self.known())}"
        )


def _has_path(data: Any, loc: tuple[str | int, ...]) -> bool:
    for part in loc:
        if isinstance(data, list):
            found = isinstance(part, int) and 0 <= part < len(data)
        else:
            found = isinstance(data, Mapping) and part in data
        if not found:
            return False
        data = data[part]
    return True


def apply(path: Path, raw: dict[str, Any]) -> Layers | None:
    """The cluster file ``path``'s mapping ``raw`` with each node set's definitions applied (in
    place; its layers directory is ``layers:``, default ``layers`` beside the file); the
    Layers that did it (for ``blame``), None when there are no node sets to resolve."""
    nodesets = raw.get("nodesets")
    if not isinstance(nodesets, list):
        return None
    layers = Layers(path, nodesets, _layers_dir(path, raw))
    raw["nodesets"] = [layers.resolve(i, ns) for i, ns in enumerate(nodesets)]
    return layers


def _layers_dir(path: Path, raw: dict[str, Any]) -> Path:
    """``layers:`` (default ``layers``) beside the cluster file ``path``, checked before any
    node set's definitions are looked up in it: a directory that is not there, or a value that is
    not a path, was reported as an unknown layer of the first node set."""
    given = raw.get("layers", "layers")
    if not isinstance(given, str) or not given.strip():
        raise ConfigError(
            f"{path}: layers: expected a directory beside the cluster file, got {quote(given)}"
        )
    directory = path.parent / given
    if "layers" in raw and not directory.is_dir():
        raise ConfigError(f"{path}: layers: {directory} is not a directory")
    return directory
