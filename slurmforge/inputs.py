"""Reading an input file (versions.yaml, a cluster file, a layer) into a typed model: the
hardened YAML loader, validation, and the one-line error that names the file and the key.

Every input model derives from `Model` (unknown keys refused, values frozen); `read_yaml` refuses
what a config file never is (over 1 MiB, not UTF-8, duplicate keys, alias bombs); `validate`
turns pydantic's report into ``<file>: <key path>: <what was expected>``.
"""

from __future__ import annotations

import functools
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from slurmforge.errors import ConfigError, quote


def inside(where: str) -> Callable[[str], str]:
    """A validator of a path relative to ``where`` (a file's directory): not absolute, no ``..``.
    The path is only read, so this is all a name needs to be kept inside."""

    def check(value: str) -> str:
        if not value or value.startswith("/") or ".." in Path(value).parts:
            raise ValueError(f"expected a path inside {where}, got {quote(value)}")
        return value

    return check


# A pattern's meaning in words, for the error that names what was expected (a type whose values a
# pattern checks says what they are with ``worded``); a pattern without words is shown as it is.
WORDS: dict[str, str] = {}


def worded(pattern: str, words: str) -> str:
    """``pattern``, whose mismatch errors will say ``expected <words>``."""
    WORDS[pattern] = words
    return pattern


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


MAX_FILE_BYTES = 1 << 20  # a config file larger than this is refused before it is parsed
MAX_NODES = 100_000  # YAML nodes after expanding aliases (a small file can expand to billions)


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader (libyaml's parser where PyYAML has it: several times faster) that refuses
    duplicate and non-scalar mapping keys instead of keeping the last (or failing on an
    unhashable one); _parse refuses aliases that expand a document past MAX_NODES."""


def _parse(text: str) -> Any:
    """The document in ``text``, composed, its size checked, then constructed."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _count_nodes(node, {}, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


@functools.lru_cache(maxsize=32)
def _parse_once(text: str) -> bytes:
    """_parse, once per text (a run reads versions.yaml and a cluster file many times over),
    kept pickled: each caller unpickles a copy of its own to change, faster than a deepcopy."""
    return pickle.dumps(_parse(text))


def _count_nodes(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many nodes ``node`` stands for once its aliases are expanded (shared nodes are counted
    once per use, computed once); a YAMLError past MAX_NODES or on a recursive alias."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_:
        raise yaml.composer.ComposerError(
            None, None, "an alias refers to a node that contains it", node.start_mark
        )
    open_.add(id(node))
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_count_nodes(child, sizes, open_) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(
            _count_nodes(k, sizes, open_) + _count_nodes(v, sizes, open_) for k, v in node.value
        )
    open_.discard(id(node))
    if size > MAX_NODES:
        raise yaml.composer.ComposerError(
            None,
            None,
            f"aliases expand this document past {MAX_NODES} values; repeat fewer",
            node.start_mark,
        )
    sizes[id(node)] = size
    return size


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(
                None,
                None,
                "a key must be a plain value, not a list or mapping",
                key_node.start_mark,
            )
        key = loader.construct_object(key_node)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {line})", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _marker(part: str | int) -> bool:
    """pydantic's markers in a key path: "[key]" (the key itself was invalid) and a union
    branch's tag, which the schemas here write as "<what it is>"."""
    return isinstance(part, str) and (part == "[key]" or part.startswith("<"))


def format_path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if _marker(part):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][\w-]*", part):
            out += f".{part}" if out else part
        else:
            out += f'."{part}"' if out else f'"{part}"'
    return out or "(top level)"


def _describe(err: dict[str, Any]) -> str:
    kind, msg, value = err["type"], err["msg"], err.get("input")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "string_pattern_mismatch":
        pattern = err["ctx"]["pattern"]
        if pattern in WORDS:
            return f"expected {WORDS[pattern]}, got {quote(value)}"
        return f"expected a value matching {pattern}, got {quote(value)}"
    if kind.endswith("_type") or kind in ("model_type", "dict_type", "tuple_type"):
        return f"{msg.lower()}, got {type(value).__name__} {quote(value)}"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    return f"{msg}, got {quote(value)}"


def _as_written(data: Any, loc: tuple[str | int, ...], missing: bool) -> tuple[str | int, ...]:
    """``loc`` as the file spells it: the parts that are keys or indexes of ``data`` along it,
    pydantic's markers, and (``missing``) the key that is not there. Left out: the names pydantic
    gives the branches of a union ('str', 'int', 'function-after[...]'), which the user never
    wrote."""
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        if _marker(part):
            out.append(part)
            continue
        if isinstance(node, dict):
            key = next((k for k in node if k == part or str(k) == str(part)), _ABSENT)
            if key is not _ABSENT:
                out.append(part)
                node = node[key]
                continue
            if missing and i == len(loc) - 1:
                out.append(part)
            continue
        if isinstance(node, list | tuple) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
    return tuple(out)


_ABSENT = object()


def _pick(errors: list[dict[str, Any]]) -> dict[str, Any]:
    # pydantic reports every failing branch; the deepest location is the most useful one.
    return max(errors, key=lambda e: len(e["loc"]))


M = TypeVar("M", bound=BaseModel)


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping (duplicate keys refused); ConfigError naming the file and line otherwise.
    The file is read as bytes (at most MAX_FILE_BYTES) and decoded as strict UTF-8."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB; a config file is far smaller"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: byte {exc.start}: not UTF-8 (0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None
    try:
        parsed = pickle.loads(_parse_once(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if mark is not None and "cannot start any token" in problem:
            problem = _unexpected(text, mark.line, mark.column) or problem
        raise ConfigError(f"{path}:{where}: invalid YAML: {problem}") from None
    if not isinstance(parsed, dict):
        raise ConfigError(
            f"{path}: expected a mapping at the top level, got {type(parsed).__name__}"
        )
    return parsed


def _unexpected(text: str, line: int, column: int) -> str | None:
    """What libyaml's "found character that cannot start any token" leaves out: the character
    (found at ``line``, ``column``), and for a tab, that YAML indents with spaces alone."""
    lines = text.splitlines()
    if not 0 <= line < len(lines) or not 0 <= column < len(lines[line]):
        return None
    char = lines[line][column]
    if char == "\t":
        return "a tab, which YAML does not allow for indentation (indent with spaces)"
    return f"found {char!r} (U+{ord(char):04X}), which cannot start any token"


Blame = Callable[[tuple[str | int, ...]], tuple[Path, tuple[str | int, ...]]]


def validate(
    model: type[M],
    data: Any,
    path: Path,
    loc: tuple[str | int, ...] = (),
    blame: Blame | None = None,
) -> M:
    """``model`` from ``data``; a ConfigError with file and key path (under ``loc``) otherwise.
    ``blame`` maps a key path to the file (and its key path) that gave the value there, for data
    merged from several files."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = _pick(exc.errors())
        written = _as_written(data, tuple(err["loc"]), err["type"] == "missing")
        where = loc + tuple(p for p in written if p == "[key]" or not _marker(p))
        if blame is not None:
            path, where = blame(where)
        raise ConfigError(f"{path}: {format_path(where)}: {_describe(err)}") from None
