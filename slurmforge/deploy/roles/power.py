"""Elastic node sets (nodesets[].elastic): the local target's node-power service, which starts and
stops nodes when slurmctld asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge.deploy.roles.monitoring import EXPORTER
from slurmforge.deploy.roles.records import Role

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


# starts and stops elastic node sets' nodes when slurmctld asks (local: a container beside the
# cluster's; k8s: a second container of slurmctld's pod, deploy/k8s/power.py)
NODE_POWER = "node-power"

POWER_SPOOL = "/run/slurmforge/power"  # where slurmctld's programs leave it their requests

POWER_VOLUME = "power"


def elastic(spec: ClusterSpec) -> bool:
    return any(ns.elastic for ns in spec.nodesets)


def _power_env(spec: ClusterSpec) -> dict[str, str]:
    nodes = [node for ns in spec.nodesets for node in ns.elastic_nodes]
    return {"NODE_POWER_PROJECT": spec.name, "NODE_POWER_NODES": ",".join(nodes)}


NODE_POWER_ROLE = Role(
    NODE_POWER,
    image=EXPORTER,  # python3 and slurmforge's own small programs
    command=("python3", "/usr/local/lib/slurmforge/node_power.py"),
    # root for the engine's socket and no other capability than to hand its request
    # directory to slurm and take requests out of it
    capabilities=("CHOWN", "DAC_OVERRIDE"),
    least_privilege=True,
    targets=("local",),
    when=elastic,
    env=_power_env,
)
