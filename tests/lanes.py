"""The tiers that mostly wait, in a lane of their own: the Kubernetes tier (its tests wait on
pods) and the cluster modules that wait on Slurm's own timers (a backup controller's takeover,
elastic nodes' idle and start times, a lost node's SlurmdTimeout: that one deploys the default
cluster again in the lane, 4 minutes of waiting moved for under one of deploying). A run that
collects them beside other tiers (README's test command) runs them in a second pytest process,
started when the session first reaches a tier past the build tier (the cluster tier, whose tests
mostly wait on their daemons too), and fails when that process fails. The lane's output goes to
.cache/k8s-lane.log; its summary, failures and slowest tests are printed at the end of the run.

A run of those alone (`pytest tests/k8s`), or with SLURMFORGE_K8S_LANE=0, runs them inline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import order

ROOT = Path(__file__).resolve().parents[1]
K8S, BUILD = ROOT / "tests" / "k8s", ROOT / "tests" / "build"
# besides tests/k8s: cluster modules whose tests wait on Slurm's timers
WAITING = (
    ROOT / "tests" / "cluster" / "test_failover.py",
    ROOT / "tests" / "cluster" / "test_elastic.py",
    ROOT / "tests" / "cluster" / "test_node_loss.py",
)
LOG = ROOT / ".cache" / "k8s-lane.log"
LANE_NAMES = "tests/k8s, test_failover.py, test_elastic.py, test_node_loss.py"


def _under(item: pytest.Item, tier: Path) -> bool:
    return tier in Path(item.fspath).resolve().parents


def _in_lane(item: pytest.Item) -> bool:
    return _under(item, K8S) or Path(item.fspath).resolve() in WAITING


class Lane:
    """The lane's selected tests in a pytest process of their own."""

    def __init__(self, nodeids: list[str]) -> None:
        self.nodeids = nodeids
        self.proc: subprocess.Popen[bytes] | None = None
        self.code: int | None = None

    def start(self) -> None:
        if self.proc is not None:
            return
        LOG.parent.mkdir(parents=True, exist_ok=True)
        with LOG.open("wb") as log:
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
        lines = LOG.read_text(errors="replace").splitlines() if LOG.exists() else []
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
    if os.environ.get("SLURMFORGE_K8S_LANE") == "0" or config.option.collectonly:
        return
    k8s = [item for item in items if _in_lane(item)]
    if not k8s or len(k8s) == len(items):
        return
    # the k8s tier first: it starts with the lane, as it did before the waiting modules joined
    k8s.sort(key=lambda item: not _under(item, K8S))
    items[:] = [item for item in items if not _in_lane(item)]
    config.hook.pytest_deselected(items=k8s)
    config.stash[_LANE] = Lane([item.nodeid for item in k8s])


_LANE = pytest.StashKey[Lane]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    lane = item.config.stash.get(_LANE, None)
    if lane is not None and not _under(item, BUILD):
        lane.start()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    lane = session.config.stash.get(_LANE, None)
    if lane is None:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        lane.stop()
        return
    if lane.proc is None and (session.shouldfail or session.shouldstop):
        return  # the run stopped (-x) before it got past the build tier: never started
    if lane.wait() != 0 and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    lane = config.stash.get(_LANE, None)
    if lane is None:
        return
    if lane.code is None:
        terminalreporter.section(
            "the second lane (k8s, failover, elastic) did not run to its end: the run stopped first"
        )
        return
    verdict = "passed" if lane.code == 0 else f"FAILED (exit {lane.code})"
    terminalreporter.section(
        f"the second lane (k8s, failover, elastic), run beside the others: {verdict} (log: {LOG})"
    )
    for line in lane.summary():
        terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    lane = config.stash.get(_LANE, None)
    if lane is not None:
        lane.stop()
