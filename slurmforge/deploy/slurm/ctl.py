"""Slurm operations a deployment runs in slurmctld's container, whichever target holds it.

Each takes ``sh``: a command line in that container → (exit code, output).
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from typing import NamedTuple

from slurmforge.errors import DeployError

Shell = Callable[[str], tuple[int, str]]
IN_SERVICE = {"idle", "mix", "alloc", "comp"}
DRAINED = {"drain", "drng"}  # sinfo's short states of a drained (or draining) node that answers
# sinfo's suffixes of a node powered down, being powered down, or about to be
POWERING_DOWN = {"~", "%", "!"}
# the reason slurmctld gives a node it marks down because its slurmd stopped answering
NOT_RESPONDING = "Not responding"
POLL = 2.0  # seconds between two looks at the jobs on nodes being drained


class Node(NamedTuple):
    state: str  # sinfo's short state: idle, alloc, drain, down*…
    reason: str  # why it is drained or down ("none" when it is not)
    down: bool = False  # DOWN under the drain sinfo shows: slurmd has not registered since


# sinfo shows a node that is DOWN and drained as "drain" (a pod's preStop leaves a node so);
# its state filter matches the DOWN under it
NODES = "sinfo -h -N -o '%N|%t|%E' && sinfo -h -N -t down -o 'down|%N'"


def nodes(sh: Shell) -> dict[str, Node] | None:
    """Node → its state and reason, as sinfo shows them; None when slurmctld does not answer."""
    code, out = sh(NODES)
    if code:
        return None
    rows = [line.split("|", 2) for line in out.splitlines()]
    down = {row[1] for row in rows if len(row) == 2 and row[0] == "down"}
    return {row[0]: Node(row[1], row[2], row[0] in down) for row in rows if len(row) == 3}


def powered_up(seen: dict[str, Node] | None, names: list[str]) -> list[str]:
    """Of ``names`` (elastic nodes), those Slurm counts as powered up, or being powered up:
    their containers or pods should run. After a restore StateSave says so of the nodes that
    ran when the backup was taken, while nothing of them runs yet. Down ones are left out, but
    for a node slurmctld marked down itself because its slurmd did not answer within
    SlurmdTimeout: a restore whose other pods took longer than that to roll out finds its
    node so. Started, it registers, and ReturnToService=2 puts it back in service."""

    def up(node: Node | None) -> bool:
        if node is None:
            return False
        state = node.state.rstrip("*")
        if state[-1:] in POWERING_DOWN:
            return False
        if node.down or state.startswith("down"):
            return state == "down" and node.reason == NOT_RESPONDING
        return True

    return [name for name in names if up((seen or {}).get(name))]


def drains(seen: dict[str, Node] | None) -> dict[str, str]:
    """The drained nodes in ``seen`` → their reasons. Taken before a deploy changes anything: an
    operator's drain (or the GPU health check's) outlives the deploy, and such a node counts as
    ready while it keeps that drain (see ``ready``)."""
    drained = (seen or {}).items()
    return {name: node.reason for name, node in drained if node.state.rstrip("*") in DRAINED}


# the node health check's drain reasons (images/slurmd/node-health): it lifts them itself
HEALTH_REASON = "health:"


def _health_drained(node: Node) -> bool:
    """The node answers, drained by its own health check (which resumes it once it passes)."""
    return node.state in DRAINED and not node.down and node.reason.startswith(HEALTH_REASON)


def _kept(node: Node, reason: str | None) -> bool:
    """The node answers in the drain it was in before (``reason``: its reason then), or in one
    its health check set: deployed, and out of service for a reason the user is told."""
    answering = node.state in DRAINED and not node.down
    return (answering and node.reason == reason) or _health_drained(node)


def ready(seen: dict[str, Node] | None, names: list[str], kept: dict[str, str]) -> bool:
    """Every node in service (idle, or running jobs), or answering in a drain ``kept`` names with
    the same reason."""
    return seen is not None and not unready(seen, names, kept)


def unready(seen: dict[str, Node] | None, names: list[str], kept: dict[str, str]) -> list[str]:
    """The nodes that are not ready, each with its state (and reason), for an error message."""
    shown = []
    for name in names:
        node = (seen or {}).get(name)
        if node is None:
            shown.append(f"{name} ({'no answer' if seen is None else 'unknown to slurmctld'})")
        elif node.state not in IN_SERVICE and not _kept(node, kept.get(name)):
            why = f": {node.reason}" if node.reason != "none" else ""
            shown.append(f"{name} ({node.state}{'+down' * node.down}{why})")
    return shown


def wait_ready(
    sh: Shell, names: list[str], kept: dict[str, str], timeout: float
) -> dict[str, Node] | None:
    """Poll until ``ready``; the last view of the nodes, which the caller checks (None:
    slurmctld never answered)."""
    deadline = time.monotonic() + timeout
    seen = nodes(sh)
    while not ready(seen, names, kept) and time.monotonic() < deadline:
        time.sleep(1)
        seen = nodes(sh)
    return seen


def require_ready(
    sh: Shell, names: list[str], kept: dict[str, str], timeout: float
) -> dict[str, Node]:
    """``wait_ready``; the nodes not ready when the time is up, each with its state, named in
    a DeployError."""
    seen = wait_ready(sh, names, kept, timeout)
    if seen is None or not ready(seen, names, kept):
        shown = ", ".join(unready(seen, names, kept))
        if seen is None:  # why slurmctld's container did not answer, as it says now
            code, out = sh(NODES)
            said = out.strip().splitlines()[-1:] or [f"exit {code}"]
            shown += f"; sinfo in slurmctld's container said: {said[0]}"
        raise DeployError(f"not every node is in service after {timeout:.0f} s: {shown}")
    return seen


def slurmd_starts(sh: Shell, names: list[str]) -> dict[str, str]:
    """Node → when its slurmd started, as its last registration told slurmctld (restored from
    StateSave until the node registers again); "" where slurmctld did not say."""
    code, out = sh(f"scontrol show node -o {shlex.quote(','.join(names))}")
    starts = dict.fromkeys(names, "")
    for line in out.splitlines() if code == 0 else []:
        name, start = re.search(r"NodeName=(\S+)", line), re.search(r"SlurmdStartTime=(\S+)", line)
        if name:
            starts[name.group(1)] = start.group(1) if start else ""
    return starts


def wait_registered(sh: Shell, before: dict[str, str], timeout: float) -> None:
    """Until each node of ``before`` (its slurmd_starts from before it was started) has
    registered a slurmd started since; a DeployError names those that did not. A node Slurm
    restored with a job shows it allocated before it has registered at all."""
    deadline = time.monotonic() + timeout
    while True:
        now = slurmd_starts(sh, list(before))
        waiting = [n for n, start in before.items() if now[n] in ("", start)]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise DeployError(
                f"{', '.join(waiting)}: started, but no slurmd registered with slurmctld "
                f"within {timeout:.0f} s"
            )
        time.sleep(1)


def bring_up(
    sh: Shell,
    names: list[str],
    start: Callable[[list[str]], object],
    kept: dict[str, str],
    timeout: float,
) -> None:
    """``start`` (the target's way to run these nodes), then wait until each has registered a
    slurmd started since, then until each is in service; a DeployError names those that are
    not."""
    before = slurmd_starts(sh, names)
    start(names)
    wait_registered(sh, before, timeout)
    require_ready(sh, names, kept, timeout)


def kept_drained(seen: dict[str, Node], names: list[str], kept: dict[str, str]) -> list[str]:
    """Lines for the user: the nodes that stayed in the drain they were in before the deploy,
    and those their health check drained."""
    lines = []
    for name in names:
        if name not in seen or not _kept(seen[name], kept.get(name)):
            continue
        if _health_drained(seen[name]):
            lines.append(
                f"{name} is drained by its health check ({seen[name].reason}); it returns to "
                "service once its checks pass"
            )
        else:
            lines.append(
                f"{name} stays drained ({seen[name].reason}); "
                f"return it with: scontrol update NodeName={name} State=RESUME"
            )
    return lines


def _drain(sh: Shell, names: str, reason: str) -> None:
    code, out = sh(f"scontrol update NodeName={names} State=DRAIN Reason={shlex.quote(reason)}")
    if code:
        raise DeployError(f"could not drain {names}: {out}")


def _wait_jobs(sh: Shell, names: str, timeout: float) -> list[str] | None:
    """None once no job runs on ``names``; else, at ``timeout``, the jobs squeue named last
    (none when it stopped answering)."""
    deadline = time.monotonic() + timeout
    jobs: list[str] = []
    while True:
        code, out = sh(f"squeue -h -w {names} -o %i")
        jobs = out.split() if code == 0 else jobs
        if code == 0 and not jobs:
            return None
        if time.monotonic() >= deadline:
            return jobs
        time.sleep(POLL)


def drain(sh: Shell, nodes: list[str], timeout: float) -> None:
    """Drain ``nodes`` (no new jobs start there) and wait until none of their jobs runs."""
    names = ",".join(nodes)
    _drain(sh, names, "slurmforge scale")
    left = _wait_jobs(sh, names, timeout)
    if left is not None:
        raise DeployError(f"jobs still running on {names} after {timeout:.0f} s: {' '.join(left)}")


def reconfigure(sh: Shell) -> None:
    """slurmctld and every slurmd re-read their configuration (nodes added or removed)."""
    code, out = sh("scontrol reconfigure")
    if code:
        raise DeployError(f"scontrol reconfigure failed: {out}")


def hold(sh: Shell, reason: str, timeout: float) -> None:
    """Drain every node with ``reason`` and wait until no job runs; pending jobs stay queued.
    When jobs still run at ``timeout``, the nodes are resumed and nothing else has changed."""
    seen = nodes(sh)
    if not seen:  # slurmctld does not answer (or has no nodes): it holds nothing either
        return
    # a node drained or down already keeps its state and its reason (release leaves it so)
    names = ",".join(name for name, node in seen.items() if node.state in IN_SERVICE)
    if names:
        _drain(sh, names, reason)
    left = _wait_jobs(sh, ",".join(seen), timeout)
    if left is None:
        return
    release(sh, reason, timeout=30)
    raise DeployError(
        f"jobs {', '.join(left) or '(slurmctld stopped answering)'} still run after "
        f"{timeout:.0f} s; the upgrade replaces every node's container, which would end them. "
        "Nothing was changed: let them finish (or scancel them) and deploy again"
    )


def release(sh: Shell, reason: str, timeout: float) -> None:
    """Resume the nodes drained with a reason that starts with ``reason`` (no other drain),
    once slurmctld answers and takes it (a node that has not registered yet is refused)."""
    deadline = time.monotonic() + timeout
    while True:
        code, out = sh("sinfo -h -N -o '%N|%E' -t drain,draining,drained")
        if code == 0:
            rows = (line.partition("|") for line in out.splitlines())
            ours = ",".join(sorted({node for node, _, why in rows if why.startswith(reason)}))
            if not ours:
                return
            code, out = sh(f"scontrol update NodeName={ours} State=RESUME")
            if code == 0:
                return
        if time.monotonic() >= deadline:
            raise DeployError(f"could not resume the nodes after {timeout:.0f} s: {out[-300:]}")
        time.sleep(1)


def wait_port(sh: Shell, port: int, what: str, timeout: float) -> None:
    """Until ``what`` accepts connections on ``port`` in its own container."""
    deadline = time.monotonic() + timeout
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{port}"
    while sh(probe)[0] != 0:
        if time.monotonic() >= deadline:
            raise DeployError(f"{what} did not listen on port {port} within {timeout:.0f} s")
        time.sleep(1)
