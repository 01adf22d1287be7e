"""Random input files for the property tests (test_fuzz.py) and the refusals' benchmark (B9):
random YAML trees and text, and the shipped files with one value replaced or removed."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.common import ROOT, dump_yaml, load_yaml

SHIPPED_VERSIONS = load_yaml((ROOT / "versions.yaml").read_text())
SHIPPED_CLUSTER = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["", "/", ":", "../../etc", "https://u:p@h/x", "a b", "0.0.0.0", "{slurm}"])
)
trees = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, shipped: dict[str, Any]) -> Any:
    """``shipped`` with one value, at a random depth, replaced by a random tree (or removed)."""
    data = copy.deepcopy(shipped)
    node: Any = data
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return data
        key = draw(st.sampled_from(keys))
        child = node[key]
        if isinstance(child, dict | list) and child and draw(st.booleans()):
            node = child
            continue
        if isinstance(node, dict) and draw(st.integers(0, 4)) == 0:
            del node[key]
        else:
            node[key] = draw(trees)
        return data


def documents(shipped: dict[str, Any]) -> st.SearchStrategy[str]:
    """What a file holds: mostly the shipped file mutated, sometimes any tree or any text."""
    as_yaml = st.builds(lambda d: dump_yaml(d, allow_unicode=True), mutated(shipped))
    return st.one_of(as_yaml, as_yaml, as_yaml, st.builds(yaml.safe_dump, trees), st.text())
