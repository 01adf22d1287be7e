"""The tiers that mostly wait, in lanes of their own beside the main process: a run that collects
them with other tiers (README's test command) runs each lane in a pytest process of its own, and
fails when one of them fails.

- ``k8s``: the Kubernetes tier (its tests wait on pods).
- ``waiting``: the cluster modules that wait on timers (a backup controller's takeover,
  elastic nodes' idle and start times, a lost node's SlurmdTimeout: that one deploys the default
  cluster again, 4 minutes of waiting moved for under one of deploying; the portal's idle culler
  and start timeout, and the browser's waits for the hub).

Both start when the session first reaches a tier past the build tier (the cluster tier, whose
tests mostly wait on their daemons too).

The image tier (testinfra on each mission cell's images: its containers are its own) runs in
lanes that follow: one per cell, each started in the place of a process that has ended, the main
process (its tests done) or the ``k8s`` lane, whichever is first, then in the place of the cell
before it; so never more than three pytest processes run at once. Started beside the k8s tier as
a fourth (a fresh run at 32f8705), the tier's first cell ran while the k8s tier's pods were
restarting, and the k8s tier met Slurm's own limits under that load: a node drained for "Kill
task failed", a release refused while the database index was being set. Run whole after the k8s
tier, it was the end of a warm run whose main process had ended as that tier did (2026-12-05:
both about 36 minutes into the suite, the run's end 48). On a fresh machine the main process
ends last, behind the prebuild, and the cells follow the k8s tier in the prebuild's order.

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


# name → whether a test file is the lane's
LANES: dict[str, Callable[[Path], bool]] = {
    "k8s": lambda p: _under(p, K8S),
    "waiting": lambda p: p in WAITING,
    "image": lambda p: _under(p, IMAGE),  # a lane per cell, following (Followers)
}
FOLLOWING = "image"
LEAD = "k8s"  # the lane whose place the followers take when it ends, as they take the main's


def lane_of(path: Path) -> str | None:
    """The lane a test file runs in; None: the main process."""
    return next((name for name, belongs in LANES.items() if belongs(path)), None)


class Lane:
    """One lane's selected tests in a pytest process of its own."""

    def __init__(self, name: str, nodeids: list[str]) -> None:
        self.name = name
        self.nodeids = nodeids
        self.log = ROOT / ".cache" / f"lane-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.code: int | None = None
        self.started = threading.Event()
        self.stopped = False
        self._lock = threading.Lock()  # a follower is started from a thread (Followers)

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
            self.started.set()

    def wait(self) -> int:
        """Its exit code, once it has started (a follower: when a place is free) and ended."""
        self.started.wait()
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


class Followers:
    """Lanes that run one after another in each place a process frees (``free``): the first
    waiting takes it, and when it ends the next takes its place, until none is left."""

    def __init__(self, lanes: list[Lane]) -> None:
        self.lanes = lanes
        self._queue = list(lanes)
        self._lock = threading.Lock()

    def free(self) -> None:
        """A place is free: the next lane starts in it, and frees it again when it ends."""
        with self._lock:
            if not self._queue:
                return
            lane = self._queue.pop(0)
            lane.start()  # a stopped lane does not start, and frees its place at once
        if lane.proc is None:
            self.free()
            return
        self.after(lane.proc)

    def after(self, proc: subprocess.Popen[bytes]) -> None:
        """A place freed when ``proc`` ends."""
        threading.Thread(target=lambda: (proc.wait(), self.free()), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            self._queue.clear()
        for lane in self.lanes:
            lane.stop()


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
    if len(set(placed.values())) < 2:
        return  # one lane's tests alone, or none of any: inline
    lanes, following = [], []
    for name in LANES:
        mine = [item for item in items if placed[item.nodeid] == name]
        config.hook.pytest_deselected(items=mine)
        if name != FOLLOWING:
            lanes += [Lane(name, [item.nodeid for item in mine])] if mine else []
            continue
        from tests.image.cells import cell_of  # the image tier's own: only where it runs

        cells: dict[str | None, list[str]] = {}
        for item in mine:  # in the collected order: the prebuild's
            cells.setdefault(cell_of(item), []).append(item.nodeid)
        following = [Lane(f"{name}-{cell or 'other'}", ids) for cell, ids in cells.items()]
    items[:] = [item for item in items if placed[item.nodeid] is None]
    config.stash[_RUN] = Run(lanes, Followers(following))


class Run:
    """The session's lanes, and the lanes that follow."""

    def __init__(self, lanes: list[Lane], followers: Followers) -> None:
        self.lanes = lanes
        self.followers = followers
        self.begun = False

    def all(self) -> list[Lane]:
        return [*self.lanes, *self.followers.lanes]

    def begin(self) -> None:
        """The lanes that start at once; the followers get the lead's place when it ends, or at
        once where the run has no lead lane."""
        if self.begun:
            return
        self.begun = True
        for lane in self.lanes:
            lane.start()
        lead = next((lane for lane in self.lanes if lane.name == LEAD and lane.proc), None)
        if lead is None:
            self.followers.free()
        else:
            self.followers.after(lead.proc)

    def stop(self) -> None:
        self.followers.stop()
        for lane in self.lanes:
            lane.stop()


_RUN = pytest.StashKey[Run]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _RUN in item.config.stash and not _under(Path(item.fspath).resolve(), BUILD):
        item.config.stash[_RUN].begin()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is None:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        run.stop()
        return
    if not run.begun and (session.shouldfail or session.shouldstop):
        return  # the run stopped (-x) before it got past the build tier: never started
    run.begin()  # a run of lanes alone: now
    run.followers.free()  # the main process' place: its tests are done
    failed = [lane for lane in run.all() if lane.wait() != 0]
    if failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash.get(_RUN, None)
    for lane in run.all() if run else []:
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
    if _RUN in config.stash:
        config.stash[_RUN].stop()
