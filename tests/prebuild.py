"""Build, one after another, the cells the suite's later tiers build for themselves (the mixed-arch
cluster's and the arm64 build test's, the upgrade test's, then the image tier's: the order in which
tests/order.py runs the modules that need them, last), so that .ci/run can start this beside the
cluster tier, whose tests mostly wait on their clusters:

    python -m tests.prebuild          (each cell's `invoke build` output goes to stdout)

A test that reaches a cell first waits for this build (one build at a time per checkout) and
then finds the cell cached. A cell that fails here is built again by its test, which reports it.
"""

from __future__ import annotations

import sys
import time

import pytest

from tests.cluster import test_mixed_arch
from tests.cluster.helpers import FROM, TO
from tests.conftest import build, select
from tests.image.conftest import IMAGE_CELLS


def cells() -> list[tuple[str, str]]:
    """The suite's cells in the order its tests build them, each once."""
    ordered = [FROM, TO, *IMAGE_CELLS]
    return list(dict.fromkeys(ordered))


def main() -> int:
    failed = 0
    print(f"prebuild: {time.strftime('%T')} {test_mixed_arch.SET} (both arches)", flush=True)
    try:
        test_mixed_arch.build_cells()  # as its fixture builds them
        # and the arm64 GPU worker and exporter, as the arm64 build tests build them
        # (tests/build/test_arm64.py; its exporter is the default cell's, the same target). A test
        # with a build to do waits for this one's lock: built there, the exporter (20 s) waited
        # most of 6 minutes of a fresh run for a compile of another Slurm below
        arm64 = f"{test_mixed_arch.CELL}-arm64"
        test_mixed_arch.run_build("--cell", arm64, "--component", "worker", "--component",
                                  "exporter")  # fmt: skip
    except AssertionError as why:
        print(f"prebuild: {test_mixed_arch.SET}: {why}", flush=True)
        failed += 1
    for set_name, cell in cells():
        print(f"prebuild: {time.strftime('%T')} {set_name} {cell}", flush=True)
        try:
            build(select(set_name, (cell,)))  # as the tests build it
        except (AssertionError, pytest.skip.Exception) as why:
            print(f"prebuild: {set_name} {cell}: {why}", flush=True)
            failed += 1
    print(f"prebuild: {time.strftime('%T')} done", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
