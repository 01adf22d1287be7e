"""The tiers that mostly wait, in lanes of their own beside the main process: a run that collects
them with other tiers (README's test command) runs each lane in a pytest process of its own,
all started when the session first reaches a tier past the build tier (the cluster tier, whose
tests mostly wait on their daemons too), and fails when one of them fails.

- ``k8s``: the Kubernetes tier (its tests wait on pods), then the image tier (testinfra on each
  mission cell's images: its containers are its own, and on a fresh machine it waits for the
  cells the prebuild makes, as it did at the main process' end). In a lane of its own beside the
  k8s tier (a fresh run at 32f8705), the image tier's first cell ran while the k8s tier's pods
  were restarting, and the k8s tier met Slurm's own limits under that load: a node drained for
  "Kill task failed", a release refused while the database index was being set.
- ``waiting``: the cluster modules that wait on timers (a backup controller's takeover,
  elastic nodes' idle and start times, a lost node's SlurmdTimeout: that one deploys the default
  cluster again, 4 minutes of waiting moved for under one of deploying; the portal's idle culler
  and start timeout, and the browser's waits for the hub).

A lane's output goes to .cache/lane-<name>.log; its summary, failures and slowest tests are
printed at the end of the run. A run of one lane's tests alone (`pytest tests/k8s`), or with
SLURMFORGE_LANES=0, runs them inline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
    "k8s": (lambda p: _under(p, K8S), lambda p: _under(p, IMAGE)),
    "waiting": (lambda p: p in WAITING,),
}


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

    def start(self) -> None:
        if self.proc is not None:
            return
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *self.nodeids]
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait(self) -> int:
        self.start()
        assert self.proc is not None
        if self.code is None:
            self.code = self.proc.wait()
        return self.code

    def stop(self) -> None:
        """The whole lane, at once (a run that was interrupted)."""
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
    lanes = []
    for name in LANES:
        mine = [item for item in items if (placed[item.nodeid] or ("",))[0] == name]
        if mine:
            mine.sort(key=lambda item: placed[item.nodeid][1])  # stable
            lanes.append(Lane(name, [item.nodeid for item in mine]))
            config.hook.pytest_deselected(items=mine)
    items[:] = [item for item in items if placed[item.nodeid] is None]
    config.stash[_LANES] = lanes


_LANES = pytest.StashKey[list[Lane]]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _under(Path(item.fspath).resolve(), BUILD):
        for lane in item.config.stash.get(_LANES, []):
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
        lane.start()  # a run of lanes alone: all of them at once
    failed = [lane for lane in lanes if lane.wait() != 0]
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
