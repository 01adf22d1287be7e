"""Build, one after another, the cells the suite's later tiers build for themselves (the mixed-arch
cluster's and the arm64 build test's, the upgrade test's, then the image tier's: the order in which
tests/order.py runs the modules that need them, last), so that .ci/run can start this beside the
cluster tier, whose tests mostly wait on their clusters:

    python -m tests.prebuild          (each cell's `invoke build` output goes to stdout)

A test that reaches a cell first waits for this build (one build at a time per checkout) and
then finds the cell cached. A cell that fails here is built again by its test, which reports it.

While it runs, its own session and Docker's containers each weigh as much on the CPU as four
sessions (``weighted``). With autogroup scheduling (Linux's default where nothing else sorts
processes into cgroups, as on CI's machines), each session's processes weigh as one task and the
engine's cgroup, every container in it, as one more. Its builds run in both: the steps of the
Dockerfiles in containers, a foreign arch's bootstrap (mmdebstrap, its maintainer scripts under
qemu-user) in its session. Beside the suite's sessions (the main pytest, each lane, the
Kubernetes lab's control plane in the k8s lane's, dockerd) they got a fraction of the cores:
the cells this builds took 59 minutes of a fresh run against 21 alone, while the tests that
needed them waited.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import copy_project
from tests.build import helpers as build_helpers
from tests.cluster import test_mixed_arch
from tests.cluster.helpers import FROM, TO
from tests.conftest import build, select
from tests.image.conftest import IMAGE_CELLS


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


# Docker's cgroup (the cgroupfs driver's parent of every container): the CPU weight file and
# the weight one session's autogroup has at nice 0, for cgroup v1 and v2
_WEIGHTS = (
    (Path("/sys/fs/cgroup/cpu/docker/cpu.shares"), 1024),
    (Path("/sys/fs/cgroup/docker/cpu.weight"), 100),
)
_AUTOGROUP = Path("/proc/self/autogroup")
# the autogroup nice at which a session weighs as about four at nice 0 (the kernel's table:
# 3906 against 1024)
_NICE_OF_FOUR = -6
SESSIONS = 4


def _dockerd_session() -> Path | None:
    """The autogroup file of dockerd's session, where dockerd leads one of its own (scripts/setup
    and scripts/ci-fresh start it with setsid): its layer commits and unpacks run there. None
    where it shares a session with anything else, whose weight this must not change."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            comm = stat.read_text().split("(", 1)[1].rsplit(")", 1)[0]
        except (OSError, IndexError):
            continue
        if comm == "dockerd" and fields[3] == stat.parent.name:  # its session is its own
            return stat.parent / "autogroup"
    return None


def _nice_of(autogroup: Path) -> str:
    return autogroup.read_text().split()[-1]  # "/autogroup-42 nice 0"


@contextlib.contextmanager
def _sessions_weighted() -> Iterator[None]:
    """This process' session (the prebuild's: .ci/run starts it with setsid) and dockerd's weigh
    as four until the block ends; dockerd's is put back then, this one ends with the process."""
    targets = [_AUTOGROUP, *filter(None, [_dockerd_session()])]
    before = {}
    for autogroup in targets:
        try:
            before[autogroup] = _nice_of(autogroup)
            autogroup.write_text(str(_NICE_OF_FOUR))
        except OSError as why:
            print(f"prebuild: {autogroup}'s CPU weight is left as it is: {why}", flush=True)
            continue
        print(f"prebuild: {autogroup}: {autogroup.read_text().strip()}", flush=True)
    try:
        yield
    finally:
        for autogroup, nice in before.items():
            if autogroup != _AUTOGROUP:
                with contextlib.suppress(OSError):
                    autogroup.write_text(nice)


@contextlib.contextmanager
def weighted() -> Iterator[None]:
    """This session, dockerd's and Docker's containers weigh as four busy sessions each until the
    block ends (SIGTERM too: .ci/run stops an unfinished prebuild with it), then dockerd's and
    the containers as before. A weight that is elsewhere (the systemd driver's cgroups) or that
    cannot be written is left as it is, with a line that says so."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with _sessions_weighted(), _containers_weighted():
            yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _containers_weighted() -> Iterator[None]:
    found = next(((f, one) for f, one in _WEIGHTS if f.is_file()), None)
    if found is None:
        print(
            "prebuild: the containers' CPU weight is left as it is: no cgroupfs parent", flush=True
        )
        yield
        return
    weight, one = found
    try:
        before = weight.read_text().strip()
        weight.write_text(str(SESSIONS * one))
    except OSError as why:
        print(f"prebuild: the containers' CPU weight is left as it is: {why}", flush=True)
        yield
        return
    print(f"prebuild: {weight} {before} -> {SESSIONS * one} while it builds", flush=True)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            weight.write_text(before)


def main() -> int:
    with weighted():
        return _build_all()


def _build_all() -> int:
    failed = 0
    print(f"prebuild: {time.strftime('%T')} {test_mixed_arch.SET} (both arches)", flush=True)
    try:
        test_mixed_arch.build_cells()  # as its fixture builds them
        # and the arm64 GPU worker, as the arm64 build test builds it (tests/build/test_arm64.py)
        arm64 = f"{test_mixed_arch.CELL}-arm64"
        test_mixed_arch.run_build("--cell", arm64, "--component", "worker")
    except AssertionError as why:
        print(f"prebuild: {test_mixed_arch.SET}: {why}", flush=True)
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
