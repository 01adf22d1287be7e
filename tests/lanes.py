"""The tiers that mostly wait, in lanes of their own beside the main process: a run that collects
them with other tiers (README's test command) runs each lane in a pytest process of its own,
started when the session first reaches a tier past the build tier (the cluster tier, whose tests
mostly wait on their daemons too), and fails when one of them fails.

- ``k8s``: the Kubernetes tier (its tests wait on pods).
- ``waiting``: the cluster modules that wait on timers (a backup controller's takeover,
  elastic nodes' idle and start times, a lost node's SlurmdTimeout: that one deploys the default
  cluster again, 4 minutes of waiting moved for under one of deploying; the portal's idle culler
  and start timeout, and the browser's waits for the hub).
- ``image``: the image tier (testinfra on each mission cell's images: its containers are its
  own, and on a fresh machine it waits for the cells the prebuild makes). It starts in the place
  of the first to end of the main process and the ``k8s`` lane (FOLLOWS), so that no more than
  three run at once: started beside the k8s tier as a fourth (a fresh run at 32f8705), its first
  cell ran while the k8s tier's pods were restarting, and the k8s tier met Slurm's own limits
  under that load (a node drained for "Kill task failed", a release refused while the database
  index was being set). Run after the k8s tier alone, it was the end of warm runs, whose main
  process had ended 15 minutes before (2026-12-05: the main process 35 minutes, the k8s lane
  48); on a fresh machine the main process ends last, behind the prebuild, and the k8s tier ends
  first, as before.

A lane's output goes to .cache/lane-<name>.log; its summary, failures and slowest tests are
printed at the end of the run. A run of one lane's tests alone (`pytest tests/k8s`), or with
SLURMFORGE_LANES=0, runs them inline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import order

ROOT = Path(__file__).resolve().parents[1]
K8S, IMAGE, BUILD = (ROOT / "tests" / tier for tier in ("k8s", "image", "build"))
# cluster modules whose tests wait on Slurm's timers
WAITING = (
    ROOT / "tests" / "cluster" / "test_failover.py",
    ROOT / "tests" / "cluster" / "test_elastic.py",
    ROOT / "tests" / "cluster" / "test_node_loss.py",
    ROOT / "tests" / "cluster" / "test_portal.py",
)


def _under(path: Path, tier: Path) -> bool:
    return tier in path.parents


# name → whether a test file is the lane's, in the order the lane runs them
LANES: dict[str, tuple[Callable[[Path], bool], ...]] = {
    "k8s": (lambda p: _under(p, K8S),),
    "waiting": (lambda p: p in WAITING,),
    "image": (lambda p: _under(p, IMAGE),),
}
# a lane that starts once the main process has run its tests or the lane named has ended,
# whichever comes first (where the run has both; else with the others)
FOLLOWS = {"image": "k8s"}


def lane_of(path: Path) -> tuple[str, int] | None:
    """The lane a test file runs in, and its group's place there; None: the main process."""
    for name, groups in LANES.items():
        for place, belongs in enumerate(groups):
            if belongs(path):
                return name, place
    return None


class Lane:
    """One lane's selected tests in a pytest process of its own."""

    def __init__(self, name: str, nodeids: list[str]) -> None:
        self.name = name
        self.nodeids = nodeids
        self.log = ROOT / ".cache" / f"lane-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.code: int | None = None
        self.then: Lane | None = None  # started when this lane ends (FOLLOWS)
        self.stopped = False
        self._lock = threading.Lock()  # its follower's start comes from a thread of its own

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *self.nodeids]

    def start(self) -> None:
        with self._lock:
            if self.proc is not None or self.stopped:
                return
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("wb") as log:
                self.proc = subprocess.Popen(
                    self.argv(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            if self.then is not None:
                proc, then = self.proc, self.then
                threading.Thread(target=lambda: (proc.wait(), then.start()), daemon=True).start()

    def wait(self) -> int:
        self.start()
        assert self.proc is not None
        if self.code is None:
            self.code = self.proc.wait()
        return self.code

    def stop(self) -> None:
        """The whole lane, at once (a run that was interrupted); one not started never starts."""
        with self._lock:
            self.stopped = True
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait()

    def summary(self) -> list[str]:
        """The lane's slowest tests, failures and final line, as it printed them."""
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        start = next((i for i, ln in enumerate(lines) if "slowest" in ln and "==" in ln), None)
        if start is None:  # it stopped before its summary
            start = max(0, len(lines) - 40)
        return lines[start:]


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    # The tests on cells CI builds beside the suite last (tests/order.py): run first, on a fresh
    # machine, the arm64 build tests compiled the same Slurm for arm64 beside the prebuild (load 30
    # on 2 cores), and the mixed-arch module held the session for 32 minutes while it waited for it.
    items.sort(key=order.rank)  # stable: each group keeps its order
    if os.environ.get("SLURMFORGE_LANES") == "0" or config.option.collectonly:
        return
    placed = {item.nodeid: lane_of(Path(item.fspath).resolve()) for item in items}
    groups = {place[0] if place else None for place in placed.values()}
    if len(groups) < 2:
        return  # one lane's tests alone, or none of any: inline
    lanes: dict[str, Lane] = {}
    for name in LANES:
        mine = [item for item in items if (placed[item.nodeid] or ("",))[0] == name]
        if mine:
            mine.sort(key=lambda item: placed[item.nodeid][1])  # stable
            lanes[name] = Lane(name, [item.nodeid for item in mine])
            config.hook.pytest_deselected(items=mine)
    for name, lead in FOLLOWS.items():
        if name in lanes and lead in lanes:
            lanes[lead].then = lanes[name]
    items[:] = [item for item in items if placed[item.nodeid] is None]
    config.stash[_LANES] = list(lanes.values())


def _follower(lane: Lane, lanes: list[Lane]) -> bool:
    """Whether the lane waits for another (FOLLOWS) before it starts."""
    return any(other.then is lane for other in lanes)


_LANES = pytest.StashKey[list[Lane]]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _under(Path(item.fspath).resolve(), BUILD):
        lanes = item.config.stash.get(_LANES, [])
        for lane in lanes:
            if not _follower(lane, lanes):
                lane.start()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    lanes = session.config.stash.get(_LANES, [])
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        for lane in lanes:
            lane.stop()
        return
    if all(lane.proc is None for lane in lanes) and (session.shouldfail or session.shouldstop):
        return  # the run stopped (-x) before it got past the build tier: never started
    for lane in lanes:
        # the main process is done: a follower takes its place, unless it had no tests (a run
        # of lanes alone: each but a follower at once, a follower after its lane)
        if session.items or not _follower(lane, lanes):
            lane.start()
    # a follower last: its wait starts it, which must come after its lane's end
    failed = [lane for lane in sorted(lanes, key=lambda x: _follower(x, lanes)) if lane.wait()]
    if failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    for lane in config.stash.get(_LANES, []):
        if lane.code is None:
            terminalreporter.section(
                f"the lane {lane.name} did not run to its end: the run stopped first"
            )
            continue
        verdict = "passed" if lane.code == 0 else f"FAILED (exit {lane.code})"
        terminalreporter.section(
            f"the lane {lane.name}, run beside the others: {verdict} (log: {lane.log})"
        )
        for line in lane.summary():
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    for lane in config.stash.get(_LANES, []):
        lane.stop()
