"""`invoke gpu-check`: run the jail's GPU health check once on every GPU node of a cluster.

The check itself is a job step (``/opt/slurmforge/gpu-check`` in the jail, from rootfs/): it runs
all_reduce_perf, drains its node when the bus bandwidth is below the threshold, and resumes a node
it drained once it passes. A drained node takes no jobs, so to re-check one this side first puts
it in a maintenance reservation for root, resumes it (nothing else can start there), runs the
check inside the reservation, and deletes the reservation: a node that fails again is drained
again by the check.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from slurmforge.deploy.roles import CONTROLLER, LOGIN
from slurmforge.deploy.target import Target
from slurmforge.errors import ConfigError, DeployError

SCRIPT = "/opt/slurmforge/gpu-check"
REASON = "slurmforge-gpu-check"  # the drain reason prefix the script sets
RESERVATION = "slurmforge-gpu-check"
_RC = re.compile(r"^__rc__ (\S+) (\d+)$")


@dataclass(frozen=True)
class NodeCheck:
    node: str
    verdict: str  # pass, drained, error, skipped
    detail: str


def gpu_nodes(target: Target) -> dict[str, tuple[str, int]]:
    """GPU node → a partition it is in (srun needs one that holds the node) and its GPUs."""
    parts = target.cluster.spec.partitions
    return {
        node: (next(p.name for p in parts if ns.name in p.nodesets), ns.gpus)
        for ns, node in target.cluster.nodes
        if ns.gpus and any(ns.name in p.nodesets for p in parts)
    }


def node_info(target: Target, nodes: list[str]) -> dict[str, tuple[str, str]]:
    """node → (state, reason)."""
    code, out = target.sh(CONTROLLER, f"sinfo -h -N -n {','.join(nodes)} -o '%N|%T|%E'")
    if code:
        raise DeployError(f"slurmctld is not answering: {out}")
    info = {}
    for line in out.splitlines():
        node, state, reason = [*line.split("|", 2), "", ""][:3]
        info[node] = (state, "" if reason == "none" else reason)
    return info


def run(
    target: Target, min_busbw: float | None, command: str | None, timeout_min: int = 15
) -> list[NodeCheck]:
    """Check every GPU node once; ``min_busbw`` (GB/s) defaults to the cluster's gpu.min_busbw."""
    if min_busbw is None:
        min_busbw = target.cluster.spec.gpu.min_busbw
    nodes = gpu_nodes(target)
    if not nodes:
        raise ConfigError(f"{target.cluster.path}: no node set requests GPUs; nothing to check")
    info = node_info(target, nodes)
    ours = [n for n in nodes if "drain" in info[n][0] and info[n][1].startswith(REASON)]
    others = [n for n in nodes if "drain" in info[n][0] and n not in ours]
    checked = [n for n in nodes if n not in others]
    results = [NodeCheck(n, "skipped", f"drained by someone else: {info[n][1]}") for n in others]
    if ours:
        _sh(
            target,
            f"scontrol create reservation ReservationName={RESERVATION} Nodes={','.join(ours)} "
            "Users=root StartTime=now Duration=60 Flags=MAINT,IGNORE_JOBS",
        )
        _sh(target, f"scontrol update NodeName={','.join(ours)} State=RESUME")
    try:
        args = f"--min-busbw {min_busbw:g}" + (
            f" --command {shlex.quote(command)}" if command else ""
        )
        script = []
        for node in checked:
            where = f"--reservation={RESERVATION} " if node in ours else ""
            part, gpus = nodes[node]
            # the whole node, every GPU of it (a job sees only the GPUs it was given)
            step = (
                f"srun -p {part} -N1 -n1 -w {node} --exclusive --gres=gpu:{gpus} {where}"
                f"-t {timeout_min} {SCRIPT} {args}"
            )
            rc = f'echo "__rc__ {node} ${{PIPESTATUS[0]}}"'
            script.append(f"( {step} 2>&1 | sed 's/^/{node}: /'; {rc} ) &")
        # srun runs where users run it: in the jail on the login node
        _, out = target.sh(
            LOGIN, f"chroot /jail bash -c {shlex.quote(chr(10).join([*script, 'wait']))}"
        )
    finally:
        if ours:
            target.sh(CONTROLLER, f"scontrol delete ReservationName={RESERVATION}")
    codes = {m.group(1): int(m.group(2)) for ln in out.splitlines() if (m := _RC.match(ln))}
    for node in checked:
        lines = [ln[len(node) + 2 :] for ln in out.splitlines() if ln.startswith(f"{node}: ")]
        said = {m.group(1) for ln in lines if (m := re.match(rf"gpu-check: {node}: (\w+):", ln))}
        verdict = {0: "pass", 1: "drained"}.get(codes.get(node, -1), "error")
        if verdict not in said:  # an exit status without the script's own verdict line
            verdict = "error"
        summary = [ln for ln in lines if ln.startswith("gpu-check:")] or lines[-3:]
        if node in ours:  # it was resumed for the check; a failure drained it again
            summary.insert(
                0,
                "resumed: passed after its drain"
                if verdict == "pass"
                else "drained again"
                if verdict == "drained"
                else "was drained by the check",
            )
        if node in ours and verdict == "error":  # not checked: back to the drain it was in
            reason = shlex.quote(info[node][1])
            target.sh(CONTROLLER, f"scontrol update NodeName={node} State=DRAIN Reason={reason}")
        results.append(NodeCheck(node, verdict, " / ".join(summary) or "no output"))
    return sorted(results, key=lambda r: r.node)


def _sh(target: Target, command: str) -> str:
    code, out = target.sh(CONTROLLER, command)
    if code:
        raise DeployError(f"{command.split()[0]} failed: {out}")
    return out
