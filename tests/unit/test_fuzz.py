"""Property: whatever a user writes into versions.yaml or a cluster file, the command line answers
with exit status 0 or 2, never a traceback, within 5 s.

Hypothesis builds the inputs: random YAML trees, random text, and the shipped files with one
value anywhere replaced by a random value (or removed). CI runs a bounded number of examples per
property; `SLURMFORGE_FUZZ_EXAMPLES=2000 pytest -m fuzz` runs more.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.common import ROOT
from tests.unit.inproc import run_cli

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("SLURMFORGE_FUZZ_EXAMPLES", "25"))
BUDGET_S = 5.0
SHIPPED_VERSIONS = yaml.safe_load((ROOT / "versions.yaml").read_text())
SHIPPED_CLUSTER = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())

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
    data = yaml.safe_load(yaml.safe_dump(shipped))
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
    as_yaml = st.builds(lambda d: yaml.safe_dump(d, allow_unicode=True), mutated(shipped))
    return st.one_of(as_yaml, as_yaml, as_yaml, st.builds(yaml.safe_dump, trees), st.text())


def check(args: list[str]) -> float:
    start = time.monotonic()
    proc = run_cli(*args)
    seconds = time.monotonic() - start
    assert proc.returncode in (0, 2), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    if proc.returncode == 2:
        assert proc.stderr.startswith("error: "), proc.stderr[:500]
    assert seconds < BUDGET_S, f"{seconds:.1f} s"
    return seconds


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=BUDGET_S),
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(text=documents(SHIPPED_VERSIONS))
def test_any_versions_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "versions.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    check(["matrix", "--config", str(path)])


@FUZZ
@given(text=documents(SHIPPED_CLUSTER))
def test_any_cluster_file(tmp_path: Path, text: str) -> None:
    layers = tmp_path / "layers"
    if not layers.exists():
        layers.symlink_to(ROOT / "deploy" / "layers")
    path = tmp_path / "cluster.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    out = tmp_path / "out"
    check(["deploy", "--target", "k8s", "--dry-run", "--cluster", str(path), "--out", str(out)])
