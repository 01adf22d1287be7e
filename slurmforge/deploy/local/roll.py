"""A deploy that changes running nodes' definitions (their image, environment, limits, devices)
replaces them a few at a time, never under their jobs: each is drained, its jobs get
``disruption.max_wait`` to end, what still runs then is requeued under its job ID (or told and
cancelled where Slurm cannot requeue it), and only then is its container made again and waited
for until it is back in service (images/slurmd/node-state does the node's part)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Protocol

from slurmforge.deploy import replace
from slurmforge.deploy.local.compose import Project
from slurmforge.deploy.roles import SLURM_CONF
from slurmforge.deploy.spec.disruption import NODE_STATE, REPLACE_REASON
from slurmforge.deploy.spec.model import Cluster

# Compose's hash of a service's definition, on its container (v1 and v2 alike); `config --hash`
# gives the file's
CONFIG_HASH = "com.docker.compose.config-hash"


class Host(Protocol):
    """What a roll asks of the local target (local/run.py's Local)."""

    cluster: Cluster
    project: Project
    dir: Path  # the generated files

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
    """Replace the nodes of ``sets`` (node set → its changed nodes, as ``changed`` found them)
    as replace.roll orders it: node-state in each node's container, then the container made
    again."""

    # a node whose generated files were deleted under it (the checkout it was deployed from)
    # mounts no slurm.conf any more: without one, node-state could not ask slurmctld about its
    # jobs and would let it be replaced under them; it is given the one this deploy wrote
    def take(name: str, wait: int) -> tuple[int, str]:
        written = (local.dir / SLURM_CONF.local / "slurm.conf").read_text()
        given = (
            f"[ -r {SLURM_CONF.path}/slurm.conf ] || {{ export SLURM_CONF=$(mktemp) && "
            f"printf %s {shlex.quote(written)} > $SLURM_CONF; }}; "
        )
        env = f"NODE_STATE_GRACE={wait} NODE_STATE_REASON={shlex.quote(REPLACE_REASON)}"
        return local.project.sh(name, f"{given}{env} {NODE_STATE} stopping {shlex.quote(name)}")

    def recreate(names: list[str]) -> None:
        local.project.compose("up", "-d", *names)

    plan = local.cluster.spec.disruption
    replace.roll(local.controller_sh, sets, plan, take, recreate, kept, timeout, log)
