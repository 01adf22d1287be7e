"""The cells the image tier tests, in the order it tests them (CI's prebuild builds them in that
order too), and the roles whose images each cell has."""

from __future__ import annotations

import os

import pytest

from slurmforge import matrix
from slurmforge.versions import load
from tests.common import TEST_CELLS, TEST_CONFIG

# Of the `current` set (Slurm 25.11/26.05 x CUDA 12.2/12.9), the whole suite on 2 cores runs
# one cell: the one whose Slurm build the upgrade test (tests/cluster) needs anyway, with the
# newer CUDA, NCCL, nccl-tests and enroot. The GitHub workflow end-to-end.yml runs every cell.
CURRENT_IN_SUITE = "25.11.7-cuda12.9.1-debian12"


def _cells() -> list[tuple[str, str]]:
    if os.environ.get("SLURMFORGE_TEST_SET") or TEST_CELLS:
        set_name = os.environ.get("SLURMFORGE_TEST_SET") or "ci"
        cells = TEST_CELLS or [c.name for c in matrix.cells_of(load(TEST_CONFIG), set_name)]
        return [(set_name, cell) for cell in cells]
    config = load(TEST_CONFIG)
    # Of the `ci` set, README's cell (README's first command built it before the suite); then
    # the current cell (its Slurm is the upgrade test's, which CI's prebuild compiles anyway).
    # The ci set's other cell, Slurm 23.11, is the images.yml workflow's and `invoke
    # test-images --set ci`'s: its compile and tier were the last 12 minutes of a fresh run,
    # which CI's 90 could not hold on a slow day (docs/development/ci.md)
    built = {c.name for c in matrix.cells_of(config, "default")}
    readme = [("ci", c.name) for c in matrix.cells_of(config, "ci") if c.name in built]
    return [*readme, ("current", CURRENT_IN_SUITE)]


IMAGE_CELLS = _cells()

ROLES = ("slurmctld", "slurmd", "worker", "login", "jail", "slurmdbd", "slurmrestd")


def cell_of(item: pytest.Item) -> str | None:
    """The cell an image test runs on: its session fixture's parameter (conftest.py)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params["project"][1] if callspec and "project" in callspec.params else None
