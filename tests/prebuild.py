"""Build, one after another, the cells the suite's later tiers build for themselves (the upgrade
test's, then the image tier's), so that .ci/run can start this beside the cluster tier, whose
tests mostly wait on their clusters:

    python -m tests.prebuild          (each cell's `invoke build` output goes to stdout)

A test that reaches a cell first waits for this build (one build at a time per checkout) and
then finds the cell cached. A cell that fails here is built again by its test, which reports it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.cluster.test_upgrade import FROM, TO
from tests.conftest import ROOT, TEST_CONFIG
from tests.image.conftest import IMAGE_CELLS


def cells() -> list[tuple[str, str]]:
    """The suite's cells in the order its tests build them, each once."""
    ordered = [FROM, TO, *IMAGE_CELLS]
    return list(dict.fromkeys(ordered))


def main() -> int:
    failed = 0
    for set_name, cell in cells():
        argv = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build"]
        argv += ["--set", set_name, "--config", str(TEST_CONFIG), "--cell", cell]
        print(f"prebuild: {set_name} {cell}", flush=True)
        env = {**os.environ, "SLURMFORGE_DEBUG": ""}
        failed += subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
