"""The JSON Schemas of the two files a user writes, cluster.yaml and versions.yaml, from the models
that load them (pydantic's own JSON Schema), for editors that complete and check YAML
(yaml-language-server) and for the reference pages.

A schema describes the file as written, which is not always the model: a node set in a cluster
file may take its keys from ``definitions`` (layers), so there only ``name`` is required. Unknown
keys are refused by the schema (``additionalProperties: false``), as the loader refuses them."""

from __future__ import annotations

import json
from typing import Any

from slurmforge.config import Versions
from slurmforge.deploy.spec.model import ClusterSpec

FILES = {"cluster": "cluster.schema.json", "versions": "versions.schema.json"}
DIR = "schema"


def _file_nodeset(schema: dict[str, Any]) -> None:
    """A node set as a cluster file may write it: ``definitions`` names layers, and a set that
    has them may leave out what they give."""
    node = schema["$defs"]["NodeSet"]
    node["properties"]["definitions"] = {
        "description": "Layers applied in order before the node set's own keys: files of the "
        "layers directory (NAME.yaml), other node sets, and the built-in `base`.",
        "type": "array",
        "items": {"type": "string", "minLength": 1},
    }
    required = [key for key in node.get("required", []) if key != "name"]
    node["required"] = ["name"]
    node["anyOf"] = [{"required": ["definitions"]}, {"required": required}]


def cluster() -> dict[str, Any]:
    schema = ClusterSpec.model_json_schema(by_alias=True, mode="validation")
    _file_nodeset(schema)
    return _headed(schema, "cluster", "A slurmforge cluster file (cluster.yaml)")


def versions() -> dict[str, Any]:
    schema = Versions.model_json_schema(by_alias=True, mode="validation")
    return _headed(schema, "versions", "slurmforge's versions.yaml")


def _headed(schema: dict[str, Any], name: str, title: str) -> dict[str, Any]:
    _bounds(schema)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        **{k: v for k, v in schema.items() if k != "title"},
    }


SCHEMAS = {"cluster": cluster, "versions": versions}


def text(name: str) -> str:
    """The schema file's text, as committed (keys in the models' order, as the files read)."""
    return json.dumps(SCHEMAS[name](), indent=2, ensure_ascii=False) + "\n"


_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _bounds(node: Any) -> None:
    """pydantic leaves a number's bounds as ``ge``/``le`` beside an ``anyOf`` when the value may
    also be written as a string (a duration): JSON Schema's words, on the number's branch."""
    if isinstance(node, list):
        for item in node:
            _bounds(item)
        return
    if not isinstance(node, dict):
        return
    bounds = {_BOUNDS[k]: node.pop(k) for k in list(node) if k in _BOUNDS}
    if bounds:
        numbers = [b for b in node.get("anyOf", [node]) if b.get("type") in ("integer", "number")]
        for branch in numbers:
            branch.update(bounds)
    for value in node.values():
        _bounds(value)
