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

import pytest
from hypothesis import HealthCheck, given, settings

from tests.common import ROOT
from tests.unit.documents import SHIPPED_CLUSTER, SHIPPED_VERSIONS, documents
from tests.unit.inproc import run_cli

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("SLURMFORGE_FUZZ_EXAMPLES", "25"))
BUDGET_S = 5.0


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
