"""A file's reference page from its JSON Schema (schema.py): every key, its type, default,
allowed values and bounds, what it is for (the models' attribute docstrings), and its value in
the file slurmforge ships where it has one. Each key's heading carries an anchor that is its
dotted path with list markers dropped (``#nodesets.elastic.max``), for links from other pages."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

Node = dict[str, Any]


def _resolve(root: Node, node: Node) -> Node:
    while "$ref" in node:
        node = {**root["$defs"][node["$ref"].rsplit("/", 1)[-1]], **_without(node, "$ref")}
    return node


def _without(node: Node, *keys: str) -> Node:
    return {k: v for k, v in node.items() if k not in keys}


def _branches(root: Node, node: Node) -> list[Node]:
    """The alternatives a value may take, ``null`` left out (an unset key is its default)."""
    node = _resolve(root, node)
    if "anyOf" in node and "properties" not in node:  # an object's anyOf constrains its keys
        out = []
        for branch in node["anyOf"]:
            out += _branches(root, branch)
        return out
    return [] if node.get("type") == "null" else [node]


def _object(root: Node, node: Node) -> Node | None:
    """The object schema among a value's alternatives, if it has keys of its own."""
    for branch in _branches(root, node):
        if branch.get("type") == "object" and "properties" in branch:
            return branch
    return None


def _type(root: Node, node: Node) -> str:
    words = []
    for branch in _branches(root, node):
        kind = branch.get("type")
        if "enum" in branch or "const" in branch:
            values = branch.get("enum", [branch.get("const")])
            words.append(" \\| ".join(f"`{json.dumps(v)}`" for v in values))
        elif kind == "array":
            words.append(f"list of {_type(root, branch.get('items', {}))}")
        elif kind == "object" and "properties" in branch:
            words.append("mapping (keys below)")
        elif kind == "object":
            value = branch.get("additionalProperties")
            inner = _type(root, value) if isinstance(value, dict) else "any"
            key = branch.get("propertyNames", {}).get("pattern")
            words.append(f"mapping of {'name' if key is None else 'key'} → {inner}")
        elif kind is not None:
            words.append(kind)
    return " or ".join(dict.fromkeys(words)) or "any"


def _bounds(root: Node, node: Node) -> list[str]:
    out = []
    names = {
        "minimum": "≥",
        "maximum": "≤",
        "exclusiveMinimum": ">",
        "exclusiveMaximum": "<",
        "minLength": "length ≥",
        "maxLength": "length ≤",
        "minItems": "at least",
        "maxItems": "at most",
        "minProperties": "entries ≥",
    }
    for branch in _branches(root, node):
        for key, word in names.items():
            if key in branch:
                out.append(f"{word} {branch[key]}")
        if "pattern" in branch:
            out.append(f"matches `{branch['pattern']}`")
        items = branch.get("items")
        if isinstance(items, dict):
            out += [f"each {b}" for b in _bounds(root, items)]
    return out


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    if not text:
        return ""
    return text if text.endswith((".", ")", "!", "?")) else f"{text}."


def _describe(root: Node, node: Node) -> str:
    """The field's own description, else its model's (a key whose value is a section)."""
    text = node.get("description")
    if not text:
        for branch in _branches(root, node):
            text = branch.get("description")
            if text:
                break
    return _sentence(text or "")


def _value(data: Any, path: tuple[str, ...]) -> Any:
    """The shipped file's value at ``path`` (lists: their first entry), or ... when absent."""
    for part in path:
        if isinstance(data, list):
            data = data[0] if data else ...
        if part == "*" and isinstance(data, dict) and data:
            data = next(iter(data.values()))
        elif isinstance(data, dict) and part in data:
            data = data[part]
        else:
            return ...
    return data


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    return text if len(text) <= 200 else f"{text[:197]}..."


def anchor(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "", path.replace("[]", "").replace("<", "").replace(">", ""))


def _keys(root: Node, node: Node, path: str, at: tuple[str, ...]) -> Iterator[tuple]:
    """(path, where in a file, field schema, required) of every key below ``node``, depth-first."""
    required = set(node.get("required", []))
    for name, field in node.get("properties", {}).items():
        here, where = f"{path}{name}", (*at, name)
        yield here, where, field, name in required
        inner = _object(root, field)
        if inner is not None:
            yield from _keys(root, inner, f"{here}.", where)
            continue
        for branch in _branches(root, field):
            items = branch.get("items")
            if branch.get("type") == "array" and isinstance(items, dict):
                inner = _object(root, items)
                if inner is not None:
                    yield from _keys(root, inner, f"{here}[].", where)
            value = branch.get("additionalProperties")
            if branch.get("type") == "object" and isinstance(value, dict):
                inner = _object(root, value)
                if inner is not None:
                    yield from _keys(root, inner, f"{here}.<name>.", (*where, "*"))


def page(schema: Node, title: str, intro: str, shipped: Path) -> str:
    """The reference page of a file: ``intro``, then each top-level key as a section and every
    key below it as an entry."""
    data = yaml.safe_load(shipped.read_text())
    lines = [f"# {title}", "", intro, ""]
    for path, where, field, required in _keys(schema, schema, "", ()):
        depth = 2 if len(where) == 1 else 3
        lines += [f"{'#' * depth} `{path}` {{#{anchor(path)}}}", ""]
        facts = [f"**Type:** {_type(schema, field)}"]
        if required:
            facts.append("**Required**")
        elif "default" in field and _object(schema, field) is None:
            default = field["default"]
            facts.append(
                "**Default:** unset" if default is None else f"**Default:** `{_flow(default)}`"
            )
        bounds = _bounds(schema, field)
        if bounds:
            facts.append(f"**Constraints:** {', '.join(bounds)}")
        lines += [" · ".join(facts), ""]
        text = _describe(schema, field)
        if text:
            lines += [text, ""]
        value = _value(data, where)
        if value is not ... and _object(schema, field) is None:
            lines += [f"In the shipped `{shipped.name}`: `{_flow(value)}`", ""]
    return "\n".join(lines).rstrip() + "\n"
