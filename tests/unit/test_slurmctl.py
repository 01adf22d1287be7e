"""The upgrade's hold and release of nodes (slurmctl.hold/release), and when a deploy counts a
node as ready, against a stand-in for the commands slurmctld answers: which nodes are drained,
what is resumed, what a timeout leaves, which drain outlives a deploy."""

from __future__ import annotations

import re

import pytest

from slurmforge.deploy.slurm import ctl
from slurmforge.errors import DeployError

REASON = "slurmforge: upgrading to Slurm 25.11.7"


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctl, "POLL", 0.0)


class Slurm:
    """Nodes with a state and a reason; jobs that run until ``ends`` squeue calls have passed."""

    def __init__(self, nodes: dict[str, tuple[str, str]], running: list[str], ends: int) -> None:
        self.nodes = dict(nodes)
        self.running, self.ends = running, ends
        self.commands: list[str] = []

    def __call__(self, command: str) -> tuple[int, str]:
        self.commands.append(command)
        if command == ctl.NODES:  # "drain+down": DOWN under a drain, as sinfo shows it
            shown = self.nodes.items()
            rows = [f"{n}|{s.removesuffix('+down')}|{r or 'none'}" for n, (s, r) in shown]
            down = [f"down|{n}" for n, (s, _) in shown if s.endswith("down")]
            return 0, "\n".join(rows + down)
        if command.startswith("sinfo -h -N -o '%N|%E'"):
            drained = {n: r for n, (s, r) in self.nodes.items() if s in ("drain", "drng")}
            return 0, "\n".join(f"{n}|{r}" for n, r in drained.items())
        if command.startswith("squeue"):
            self.ends -= 1
            return 0, "" if self.ends < 0 else "\n".join(self.running)
        update = re.match(
            r"scontrol update NodeName=(\S+) State=(\w+)(?: Reason='(.*)')?$", command
        )
        assert update, command
        for node in update[1].split(","):
            self.nodes[node] = ("drain", update[3]) if update[2] == "DRAIN" else ("idle", "")
        return 0, ""


def test_hold_drains_the_nodes_in_service_and_waits_for_the_running_jobs() -> None:
    slurm = Slurm({"a": ("idle", ""), "b": ("alloc", ""), "c": ("drain", "disk")}, ["7"], ends=2)
    ctl.hold(slurm, REASON, timeout=30)
    assert slurm.nodes == {"a": ("drain", REASON), "b": ("drain", REASON), "c": ("drain", "disk")}
    assert sum(c.startswith("squeue") for c in slurm.commands) == 3
    ctl.release(slurm, "slurmforge: upgrading", timeout=5)
    # the admin's drain (and its reason) is left alone
    assert slurm.nodes == {"a": ("idle", ""), "b": ("idle", ""), "c": ("drain", "disk")}


def test_jobs_still_running_at_the_timeout_undo_the_hold() -> None:
    slurm = Slurm({"a": ("alloc", ""), "b": ("idle", "")}, ["7", "9"], ends=10**6)
    with pytest.raises(DeployError, match=r"jobs 7, 9 still run after 0 s; .* Nothing was"):
        ctl.hold(slurm, REASON, timeout=0)
    assert slurm.nodes == {"a": ("idle", ""), "b": ("idle", "")}


def test_a_drain_from_before_the_deploy_counts_as_ready_while_it_keeps_its_reason() -> None:
    before = Slurm(
        {
            "a": ("idle", ""),
            "b": ("drng", "disk swap"),
            "c": ("down*", "gone"),
            "d": ("drain+down", "fan"),
        },
        [],
        0,
    )
    kept = ctl.drains(ctl.nodes(before))
    assert kept == {"b": "disk swap", "d": "fan"}  # down is not a drain: it has to come back
    names = ["a", "b"]
    after = Slurm({"a": ("idle", ""), "b": ("drain", "disk swap")}, [], 0)
    seen = ctl.wait_ready(after, names, kept, timeout=0)
    assert ctl.ready(seen, names, kept)
    assert ctl.kept_drained(seen, names, kept) == [
        "b stays drained (disk swap); return it with: scontrol update NodeName=b State=RESUME"
    ]
    # no drain is ready unless it was there before, with that reason, and the node answers
    for b, why in [
        (("drain", "Low RealMemory"), "b (drain: Low RealMemory)"),
        (("drain*", "disk swap"), "b (drain*: disk swap)"),
        (("drain+down", "disk swap"), "b (drain+down: disk swap)"),  # not registered since
    ]:
        seen = ctl.nodes(Slurm({"a": ("idle", ""), "b": b}, [], 0))
        assert not ctl.ready(seen, names, kept)
        assert ctl.unready(seen, names, kept) == [why]
        assert ctl.unready(seen, names, {}) == [why]
    seen = ctl.nodes(Slurm({"a": ("drain", "disk swap")}, [], 0))
    missing = ["a (drain: disk swap)", "b (unknown to slurmctld)"]  # a's drain is new
    assert ctl.unready(seen, names, kept) == missing
    assert ctl.unready(None, names, kept) == ["a (no answer)", "b (no answer)"]
    # a controller that never answers: the error says what its container said last
    refusal = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    with pytest.raises(DeployError) as raised:
        ctl.require_ready(lambda _: (1, f"sinfo: error: x\n{refusal}\n"), names, kept, 0)
    assert str(raised.value) == (
        "not every node is in service after 0 s: a (no answer), b (no answer); "
        f"sinfo in slurmctld's container said: {refusal}"
    )


def test_the_elastic_nodes_slurm_counts_as_powered_up_are_those_it_would_give_jobs() -> None:
    """Powered up, or being powered up, answering or not, running jobs or drained, or down
    because slurmctld heard nothing from it (a restore slower than SlurmdTimeout); not powered
    down, being or about to be powered down, or down for another reason."""
    nodes = {
        "up": ("idle", ""),
        "lost": ("idle*", ""),  # a restored node whose slurmd has not registered yet
        "busy": ("alloc", ""),
        "starting": ("idle#", ""),
        "drained": ("drain", "disk swap"),
        "off": ("idle~", ""),
        "stopping": ("idle%", ""),
        "to-stop": ("idle!", ""),
        "failed": ("down~", "ResumeTimeout reached"),
        "gone": ("down*", "Not responding"),
        "set-down": ("down*", "PSU replaced"),  # an operator's
        "failed-silent": ("down~", "Not responding"),
        "drained-down": ("drain+down", "fan"),
    }
    seen = ctl.nodes(Slurm(nodes, [], 0))
    assert ctl.powered_up(seen, [*nodes, "unknown"]) == [
        "up", "lost", "busy", "starting", "drained", "gone"
    ]  # fmt: skip
    assert ctl.powered_up(None, list(nodes)) == []


def test_a_started_node_counts_once_a_slurmd_started_since_has_registered() -> None:
    """cpu-1 registers at the third look; cpu-2 never does (still its restored start time)."""
    looks = []

    def sh(command: str) -> tuple[int, str]:
        assert command in ("scontrol show node -o cpu-1,cpu-2", "scontrol show node -o cpu-1")
        looks.append(command)
        new = "2026-11-28T00:24:01" if len(looks) >= 3 else "2026-11-28T00:10:00"
        return 0, (
            f"NodeName=cpu-1 Arch=x86_64 SlurmdStartTime={new} State=ALLOCATED\n"
            "NodeName=cpu-2 Arch=x86_64 SlurmdStartTime=2026-11-28T00:10:00 State=IDLE\n"
        )

    before = ctl.slurmd_starts(sh, ["cpu-1", "cpu-2"])
    assert before == dict.fromkeys(["cpu-1", "cpu-2"], "2026-11-28T00:10:00")
    ctl.wait_registered(sh, {"cpu-1": before["cpu-1"]}, timeout=30)
    assert len(looks) == 3
    with pytest.raises(DeployError, match=r"^cpu-2: started, but no slurmd registered"):
        ctl.wait_registered(sh, before, timeout=0)
    # a controller that does not answer registers nothing
    assert ctl.slurmd_starts(lambda c: (1, "error"), ["cpu-1"]) == {"cpu-1": ""}


def test_a_node_its_health_check_drained_is_deployed_and_said_so() -> None:
    """A node that answers, drained by its own health check (a new threshold, a full /tmp) is
    deployed: its check resumes it once it passes. One that does not answer is not."""
    names = ["a", "b"]
    reason = "health: driver 535.104.05 older than 550.54.15"
    seen = ctl.nodes(Slurm({"a": ("idle", ""), "b": ("drain", reason)}, [], 0))
    assert ctl.ready(seen, names, {})
    assert ctl.kept_drained(seen, names, {}) == [
        f"b is drained by its health check ({reason}); it returns to service once its checks pass"
    ]
    seen = ctl.nodes(Slurm({"a": ("idle", ""), "b": ("drain+down", reason)}, [], 0))
    assert ctl.unready(seen, names, {}) == [f"b (drain+down: {reason})"]
