"""Loading versions.yaml: its schema (config.py), the references between its parts, the lock
file beside it, and every image tag its sets make (matrix.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmforge import features, matrix, refs, state
from slurmforge.config import Config, Versions
from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import format_path, read_yaml, validate


def load(path: Path) -> Config:
    """Parse and validate ``path`` (and its lock file); raise ConfigError with file and key path."""
    versions = validate(Versions, read_yaml(path), path)
    _check_references(path, versions)
    config = Config(path=path, versions=versions, locked=state.read_sources_lock(path))
    _check_tags(config)
    return config


_AXIS = {"slurm": "Slurm", "cuda": "CUDA"}


def _check_references(path: Path, v: Versions) -> None:
    known = {"distro": v.distros, "slurm": v.slurm, "cuda": v.cuda}
    label = {"distro": "distro", "slurm": "Slurm version", "cuda": "CUDA version"}
    for set_name, mset in v.sets.items():
        if mset.matrix is not None:
            for axis in ("distro", "slurm", "cuda"):
                values = getattr(mset.matrix, axis)
                for i, value in enumerate(values):
                    if value not in known[axis]:
                        _unknown(
                            path,
                            ("sets", set_name, "matrix", axis, i),
                            label[axis],
                            value,
                            known[axis],
                        )
                if len(set(values)) != len(values):
                    raise ConfigError(
                        f"{path}: {format_path(('sets', set_name, 'matrix', axis))}: "
                        f"duplicate entries in {list(values)}"
                    )
        for i, cell in enumerate(mset.include):
            for axis in ("distro", "slurm", "cuda"):
                value = getattr(cell, axis)
                if value not in known[axis]:
                    _unknown(
                        path,
                        ("sets", set_name, "include", i, axis),
                        label[axis],
                        value,
                        known[axis],
                    )
    for name, tool in v.tools.items():
        axis = features.FEATURES[name].axis  # 'slurm' or 'cuda': whose entry picks the release
        for version, picks in v.picks(name).items():
            picked = picks.get(name)
            where = format_path((axis, version, "tools", name))
            if tool.releases and picked is None:
                raise ConfigError(
                    f"{path}: {where}: required key is missing (tools.{name} has several "
                    f"releases; pick one of {', '.join(tool.releases)} for {_AXIS[axis]} {version})"
                )
            if picked is not None and picked not in tool.releases:
                raise ConfigError(
                    f"{path}: {where}: unknown release {picked!r}; expected one of "
                    f"{', '.join(tool.releases) or '(none: the tool has no releases)'}"
                )
    for axis, entries in (("slurm", v.slurm), ("cuda", v.cuda)):
        for version, entry in entries.items():
            for name in entry.tools:
                if name not in v.tools or features.FEATURES[name].axis != axis:
                    raise ConfigError(
                        f"{path}: {format_path((axis, version, 'tools', name))}: unknown tool"
                        + _picked_elsewhere(name, axis)
                    )
    for name, distro in v.distros.items():
        if distro.bootstrap and not distro.bootstrap.mirror.startswith(("http://", "https://")):
            raise ConfigError(
                f"{path}: distros.{name}.bootstrap.mirror: expected an http(s) Debian mirror"
            )


def _picked_elsewhere(name: str, axis: str) -> str:
    feature = features.FEATURES.get(name)
    if feature is None or feature.axis == axis:
        return ""
    return (
        f" under {axis} (it is built against {_AXIS[feature.axis]}: pick its release under "
        f"{feature.axis}.<version>.tools)"
    )


def _unknown(
    path: Path, loc: tuple[str | int, ...], what: str, value: str, known: dict[str, Any]
) -> None:
    raise ConfigError(
        f"{path}: {format_path(loc)}: unknown {what} {quote(value)}; "
        f"expected one of {', '.join(sorted(known))}"
    )


def _check_tags(config: Config) -> None:
    """Every tag every set makes, for each of its cells and public components, is a valid image
    reference (the distribution grammar): refused when versions.yaml is loaded, not by the
    daemon halfway through a build."""
    for set_name, mset in config.versions.sets.items():
        cells = matrix.cells_of(config, set_name)
        for component in (n for n, c in matrix.COMPONENTS.items() if c.public):
            for cell in cells:
                values = matrix.tag_values(component, cell)
                for i, template in enumerate(mset.tags):
                    tag = template.format(**values) + matrix.arch_suffix(cell.arch)
                    try:
                        refs.tagged(mset.registry, component, tag)
                    except ValueError as exc:
                        raise ConfigError(
                            f"{config.path}: {format_path(('sets', set_name, 'tags', i))}: "
                            f"{quote(template)} for {component} of {cell.name} {exc}"
                        ) from None
