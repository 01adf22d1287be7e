"""Layered node-set definitions: each merge rule, the built-in base layer, cycles, unknowns."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge.deploy.spec.layers import BASE_LAYER, Layers, apply, deep_update
from slurmforge.errors import ConfigError
from tests.common import dump_yaml


def test_maps_recurse_and_scalars_are_replaced() -> None:
    below = {"a": {"x": 1, "y": {"z": 2}}, "s": "old"}
    above = {"a": {"y": {"w": 3}}, "s": "new"}
    assert deep_update(below, above) == {"a": {"x": 1, "y": {"z": 2, "w": 3}}, "s": "new"}
    assert below == {"a": {"x": 1, "y": {"z": 2}}, "s": "old"}, "inputs are not modified"


def test_string_lists_are_united_in_order_without_duplicates() -> None:
    assert deep_update({"f": ["cpu", "small"]}, {"f": ["gpu", "cpu", "fast"]}) == {
        "f": ["cpu", "small", "gpu", "fast"]
    }


def test_lists_of_maps_match_by_name() -> None:
    below = {"v": [{"name": "a", "size": 1, "opts": ["x"]}, {"name": "b", "size": 2}]}
    above = {
        "v": [{"name": "b", "size": 20}, {"name": "c", "size": 3}, {"name": "a", "opts": ["y"]}]
    }
    assert deep_update(below, above) == {
        "v": [
            {"name": "a", "size": 1, "opts": ["x", "y"]},
            {"name": "b", "size": 20},
            {"name": "c", "size": 3},
        ]
    }


def test_match_expressions_match_by_key_so_a_region_is_replaced() -> None:
    region = {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["eu-north1"]}
    gpu = {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
    below = {"affinity": {"matchExpressions": [region, gpu]}}
    moved = {**region, "values": ["us-central1"]}
    merged = deep_update(below, {"affinity": {"matchExpressions": [moved]}})
    assert merged["affinity"]["matchExpressions"] == [moved, gpu]
    # an unmatched key is appended
    zone = {"key": "topology.kubernetes.io/zone", "operator": "Exists"}
    merged = deep_update(merged, {"affinity": {"matchExpressions": [zone]}})
    assert merged["affinity"]["matchExpressions"] == [moved, gpu, zone]


def test_other_lists_and_type_changes_are_replaced() -> None:
    assert deep_update({"n": [1, 2]}, {"n": [3]}) == {"n": [3]}
    assert deep_update({"n": {"a": 1}}, {"n": "flat"}) == {"n": "flat"}
    assert deep_update({"n": [{"no-name": 1}]}, {"n": [{"no-name": 2}]}) == {"n": [{"no-name": 2}]}


def _layers(tmp_path: Path, nodesets: list[dict], files: dict[str, dict]) -> Layers:
    layers_dir = tmp_path / "layers"
    layers_dir.mkdir(exist_ok=True)
    for name, data in files.items():
        (layers_dir / f"{name}.yaml").write_text(dump_yaml(data))
    return Layers(tmp_path / "cluster.yaml", nodesets, layers_dir)


def test_base_first_then_layers_in_order_then_own_keys(tmp_path: Path) -> None:
    nodesets = [{"name": "n", "definitions": ["one", "two"], "cpus": 7}]
    files = {"one": {"cpus": 2, "memory_mb": 100, "features": ["a"]}, "two": {"cpus": 3}}
    out = _layers(tmp_path, nodesets, files).resolve(0, nodesets[0])
    assert out["cpus"] == 7  # own keys last
    assert out["memory_mb"] == 100  # layer "one" over base
    assert out["features"] == ["a"]
    assert out["image"] == BASE_LAYER["image"]  # from base
    assert "definitions" not in out


def test_a_node_set_without_definitions_gets_no_base(tmp_path: Path) -> None:
    nodesets = [{"name": "n", "cpus": 1}]
    assert _layers(tmp_path, nodesets, {}).resolve(0, nodesets[0]) == {"name": "n", "cpus": 1}


def test_another_node_set_is_a_layer_without_its_name(tmp_path: Path) -> None:
    nodesets = [
        {"name": "small", "definitions": ["base"], "cpus": 2, "features": ["x"]},
        {"name": "big", "definitions": ["small"], "features": ["y"]},
    ]
    out = _layers(tmp_path, nodesets, {}).resolve(1, nodesets[1])
    assert out["name"] == "big"
    assert out["cpus"] == 2
    assert out["features"] == ["x", "y"]


def test_layer_files_may_use_definitions(tmp_path: Path) -> None:
    files = {"gpu": {"features": ["gpu"]}, "h100": {"definitions": ["gpu"], "features": ["h100"]}}
    nodesets = [{"name": "n", "definitions": ["h100"]}]
    assert _layers(tmp_path, nodesets, files).resolve(0, nodesets[0])["features"] == [
        "gpu",
        "h100",
    ]


@pytest.mark.parametrize(
    ("nodesets", "files", "message"),
    [
        (
            [{"name": "n", "definitions": ["n"]}],
            {},
            "nodesets[0].definitions[0]: layer cycle n → n",
        ),
        (
            [{"name": "a", "definitions": ["b"]}, {"name": "b", "definitions": ["a"]}],
            {},
            "layer cycle a → b → a",
        ),
        (
            [{"name": "n", "definitions": ["f"]}],
            {"f": {"definitions": ["g"]}, "g": {"definitions": ["f"]}},
            "g.yaml: definitions[0]: layer cycle f → g → f",
        ),
        ([{"name": "n", "definitions": ["nope"]}], {"gpu": {}}, "unknown layer 'nope'"),
        ([{"name": "n", "definitions": "gpu"}], {"gpu": {}}, "expected a list of layer names"),
        ([{"name": "n"}, {"name": "n"}], {}, "nodesets[1].name: duplicate node set name 'n'"),
        ([{"name": "gpu"}], {"gpu": {}}, "'gpu' is also the layer file"),
        ([{"name": "n"}], {"base": {}}, "'base' is the built-in layer"),
    ],
)
def test_bad_layering_is_refused(tmp_path: Path, nodesets, files, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        layers = _layers(tmp_path, nodesets, files)
        for i, ns in enumerate(nodesets):
            layers.resolve(i, ns)
    assert message in exc.value.message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("elsewhere", "layers: {dir}/elsewhere is not a directory"),
        ("cluster.yaml", "layers: {dir}/cluster.yaml is not a directory"),
        ({"a": 1}, "layers: expected a directory beside the cluster file, got {'a': 1}"),
        (123, "layers: expected a directory beside the cluster file, got 123"),
        ("", "layers: expected a directory beside the cluster file, got ''"),
    ],
)
def test_a_layers_directory_that_is_not_one_is_named_not_its_first_layer(
    tmp_path: Path, value, message: str
) -> None:
    """`layers:` naming no directory was reported as node set 0's unknown layer ('' took every
    YAML file beside the cluster file as a layer)."""
    path = tmp_path / "cluster.yaml"
    path.write_text("")
    raw = {"layers": value, "nodesets": [{"name": "n", "definitions": ["gpu"]}]}
    with pytest.raises(ConfigError) as exc:
        apply(path, raw)
    assert exc.value.message == f"{path}: " + message.replace("{dir}", str(tmp_path))


def test_without_a_layers_key_a_missing_layers_directory_is_none(tmp_path: Path) -> None:
    raw = {"nodesets": [{"name": "n", "cpus": 1}]}
    apply(tmp_path / "cluster.yaml", raw)  # the built-in base layer alone
    assert raw["nodesets"][0]["cpus"] == 1
