"""The order of the session's tests on a machine that has built nothing yet (CI's fresh runs).

Most of the suite runs on the default cell, which README's first command builds before the tests
start. The rest needs cells that .ci/run builds beside the suite (tests/prebuild.py: the grace
set's two arches, then Slurm 25.11): those modules run last, in the order the prebuild
finishes their cells, so no test waits for a compile while tests that could run are queued behind
it. Each group keeps its collected order; on a machine that has every cell, the order changes
nothing but when they run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# in the prebuild's order: what each needs beyond the default cell
LATE = (
    TESTS / "cluster" / "test_mixed_arch.py",  # grace, both arches
    TESTS / "registry" / "test_manifest_list.py",  # grace's arm64 slurmd
    TESTS / "build" / "test_arm64.py",  # grace's arm64 worker and jail, the default cell's slurmd
    TESTS / "cluster" / "test_upgrade.py",  # current 25.11 (CUDA 12.2)
    TESTS / "image",  # ci 24.05, current 25.11 (CUDA 12.9)
)


def rank(item: pytest.Item) -> int:
    """0 for a test on the default cell; else 1 + its place in LATE."""
    path = Path(item.fspath).resolve()
    for place, late in enumerate(LATE, start=1):
        if path == late or late in path.parents:
            return place
    return 0
