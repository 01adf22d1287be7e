"""The grace set's two cells that the mixed-arch cluster runs (tests/cluster/test_mixed_arch.py),
and their build, which CI's prebuild (tests/prebuild.py) also makes ahead of that test."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.common import ROOT

SET, CUDA = "grace", "12.9.1"
CELL = f"24.05.8-cuda{CUDA}-debian12"


def run_build(*args: str) -> None:
    argv = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build", "--set", SET]
    proc = subprocess.run([*argv, *args], cwd=ROOT, env={**os.environ, "SLURMFORGE_DEBUG": ""},
                          timeout=3600)  # fmt: skip
    assert proc.returncode == 0, f"build {' '.join(args)} failed (see .cache/logs/latest)"


def build_cells() -> None:
    """The amd64 cell's images, and the arm64 cell's node image and jail (Slurm cross-compiled,
    installed under emulation)."""
    run_build("--cell", CELL)
    run_build("--cell", f"{CELL}-arm64", "--component", "slurmd", "--component", "jail")
