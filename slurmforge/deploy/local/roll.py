"""A deploy that changes running nodes' definitions (their image, environment, limits, devices)
replaces them a few at a time, never under their jobs: each is drained, its jobs get
``disruption.max_wait`` to end, what still runs then is requeued under its job ID (or told and
cancelled where Slurm cannot requeue it), and only then is its container made again and waited
for until it is back in service (images/slurmd/node-state does the node's part)."""

from __future__ import annotations

import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from slurmforge.deploy.local.compose import Project
from slurmforge.deploy.slurm import ctl
from slurmforge.deploy.spec.disruption import NODE_STATE
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import DeployError

# Compose's hash of a service's definition, on its container (v1 and v2 alike); `config --hash`
# gives the file's
CONFIG_HASH = "com.docker.compose.config-hash"
REASON = "deploy replaces it"


class Host(Protocol):
    """What a roll asks of the local target (local/run.py's Local)."""

    cluster: Cluster
    project: Project

    def controller_sh(self, command: str) -> tuple[int, str]: ...


def changed(project: Project, cluster: Cluster) -> dict[str, list[str]]:
    """Node set → its running nodes whose container Compose would make again (the Compose
    file's definition of it differs). An elastic set's nodes are Slurm's to stop and start, and
    take a new definition when Slurm next starts them."""
    out = project.compose("config", "--hash", "*", capture=True).stdout
    wanted = dict(line.split(None, 1) for line in out.splitlines() if " " in line)
    found = project.containers()
    sets: dict[str, list[str]] = {}
    for ns, node in cluster.fixed_nodes:
        container = found.get(node)
        if container is None or container.status != "running":
            continue  # `up` makes and starts it; nothing runs there
        if container.labels.get(CONFIG_HASH) != wanted.get(node, "").strip():
            sets.setdefault(ns.name, []).append(node)
    return sets


def roll(
    local: Host, sets: dict[str, list[str]], kept: dict[str, str], timeout: float, log
) -> None:
    """Replace the nodes of ``sets`` (node set → its changed nodes, as ``changed`` found them),
    ``max_unavailable`` of a set at a time; each batch is in service again (or in the drain
    ``kept`` says it was in) before the next is taken. slurmctld must answer first: a node that
    cannot ask it about its jobs would be replaced under them."""
    if not sets:
        return
    plan = local.cluster.spec.disruption
    deadline = time.monotonic() + timeout
    while ctl.nodes(local.controller_sh) is None:
        if time.monotonic() > deadline:
            raise DeployError(
                f"slurmctld did not answer within {timeout:.0f} s; no node was replaced"
            )
        time.sleep(1)
    for nodes in sets.values():
        step = plan.max_unavailable
        for names in (nodes[i : i + step] for i in range(0, len(nodes), step)):
            its = "its" if len(names) == 1 else "their"
            print(
                f"note: replacing {', '.join(names)} ({its} definition changed): drained, {its} "
                f"jobs get up to {plan.max_wait} s (disruption.max_wait)",
                file=log,
            )
            _take(local.project, names, plan.max_wait, log)
            ctl.bring_up(local.controller_sh, names, lambda n: _recreate(local.project, n),
                         kept, timeout)  # fmt: skip


def _take(project: Project, names: list[str], wait: int, log) -> None:
    """Each node drained, its jobs waited for and the rest requeued, all at once."""
    env = f"NODE_STATE_GRACE={wait} NODE_STATE_REASON={shlex.quote(REASON)}"

    def take(name: str) -> tuple[int, str]:
        return project.sh(name, f"{env} {NODE_STATE} stopping {shlex.quote(name)}")

    with ThreadPoolExecutor(len(names)) as pool:
        done = list(pool.map(take, names))
    for name, (code, out) in zip(names, done, strict=True):
        if code:
            raise DeployError(f"{name}: taking it for its replacement failed: {out[-300:]}")
        for line in out.splitlines():
            print(f"note: {line}", file=log)


def _recreate(project: Project, names: list[str]) -> None:
    project.compose("up", "-d", "--no-deps", *names)
