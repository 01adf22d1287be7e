"""Build, one after another, the cells the suite's later tiers build for themselves (the mixed-arch
cluster's and the arm64 build test's, the upgrade test's, then the image tier's: the order in which
tests/order.py runs the modules that need them, last), so that .ci/run can start this beside the
cluster tier, whose tests mostly wait on their clusters:

    python -m tests.prebuild             (each cell's `invoke build` output goes to stdout)
    python -m tests.prebuild arm64-base  (that cell's arm64 base alone, beside README's build)

A test that reaches a cell first waits for this build (one build at a time per checkout) and
then finds the cell cached. A cell that fails here is built again by its test, which reports it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bench.common import copy_project
from tests import mixed_arch
from tests.build import helpers as build_helpers
from tests.cluster.helpers import FROM, TO
from tests.common import build, select
from tests.image.cells import IMAGE_CELLS


def cells() -> list[tuple[str, str]]:
    """The suite's cells in the order its tests build them, each once."""
    ordered = [FROM, TO, *IMAGE_CELLS]
    return list(dict.fromkeys(ordered))


def _default_arm64_exporter() -> bool:
    """The default cell's arm64 exporter, built as the arm64 build test builds it: in a copy of
    the project whose default set has both arches (its images differ from the grace set's in
    their labels alone, and a copy's are the checkout's). There, a build with anything to do
    waits for this one's lock: it waited most of 6 minutes of each fresh run for a compile of
    another Slurm below, for a build of seconds; built here first, it only tags."""
    cell = f"{build_helpers.CELL}-arm64"
    print(f"prebuild: {time.strftime('%T')} default {cell} exporter", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = copy_project(Path(tmp), share_build_lock=True)
        build_helpers.with_arm64(root)
        proc = build_helpers.run_build(root, "--set", "default", "--cell", cell, "--component",
                                       "exporter")  # fmt: skip
    print(proc.stdout[-2000:] + proc.stderr[-2000:], flush=True)
    return proc.returncode == 0


def _arm64_base() -> bool:
    """The grace set's arm64 base, which .ci/run bootstraps beside README's build: it depends on
    nothing of README's cell, and that build, a chain (the amd64 bootstrap, the Slurm compile,
    the role images one after another), left a core idle most of its minutes on a fresh machine,
    where this bootstrap (mostly one core: its packages' scripts under qemu-user) took about 4
    minutes of the prebuild. In a copy of the project, under the copy's own build lock: under the
    checkout's, README's build would wait for it. .ci/run waits for it before starting the
    prebuild, which then finds the base cached."""
    print(f"prebuild: {time.strftime('%T')} {mixed_arch.SET} arm64 base", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = copy_project(Path(tmp))
        argv = [sys.executable, "-m", "invoke", "--search-root", str(root), "build", "--set",
                mixed_arch.SET, "--cell", f"{mixed_arch.CELL}-arm64", "--component",
                "base"]  # fmt: skip
        return subprocess.run(argv, cwd=root, timeout=3600).returncode == 0


def main() -> int:
    if sys.argv[1:] == ["arm64-base"]:
        return 0 if _arm64_base() else 1
    failed = 0
    print(f"prebuild: {time.strftime('%T')} {mixed_arch.SET} (both arches)", flush=True)
    try:
        mixed_arch.build_cells()  # as its fixture builds them
        # and the arm64 GPU worker, as the arm64 build test builds it (tests/build/test_arm64.py)
        arm64 = f"{mixed_arch.CELL}-arm64"
        mixed_arch.run_build("--cell", arm64, "--component", "worker")
    except AssertionError as why:
        print(f"prebuild: {mixed_arch.SET}: {why}", flush=True)
        failed += 1
    failed += not _default_arm64_exporter()
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
