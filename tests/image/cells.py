"""The cells the image tier tests, in the order it tests them (CI's prebuild builds them in that
order too), and the roles whose images each cell has."""

from __future__ import annotations

import os

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
    mission = [("ci", c.name) for c in matrix.cells_of(config, "ci")]
    # README's cell first (README's first command built it before the suite), then the current
    # cell (its Slurm is the upgrade test's, which CI's prebuild compiles first), the oldest
    # Slurm last: tests/prebuild.py builds them in this order, so on a fresh machine the tier
    # tests one cell while the next one compiles (in the order of the set, it waited 11.5
    # minutes for 23.11 first, then ran every cell after the prebuild had ended)
    built = {c.name for c in matrix.cells_of(config, "default")}
    readme = [c for c in mission if c[1] in built]
    oldest = [c for c in mission if c not in readme]
    return [*readme, ("current", CURRENT_IN_SUITE), *oldest]


IMAGE_CELLS = _cells()

ROLES = ("slurmctld", "slurmd", "worker", "login", "jail", "slurmdbd", "slurmrestd")
