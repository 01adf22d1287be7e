"""The scheduled GPU health check (kubernetes.health_check; locally `invoke gpu-check`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge.deploy.roles.base import JAIL_CONF, LOGIN, MUNGE, SLURM_CONF
from slurmforge.deploy.roles.records import DAEMON, Role

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


HEALTH_CHECK = "gpu-health-check"


def _health_check(spec: ClusterSpec) -> bool:
    return spec.kubernetes.health_check.enabled and any(ns.gpus for ns in spec.nodesets)


HEALTH_CHECK_ROLE = Role(
    HEALTH_CHECK,
    image=LOGIN,  # set up like the login node: srun inside the jail
    workload="schedule",
    secrets=(MUNGE,),
    configs=(SLURM_CONF, JAIL_CONF),
    jail="rw",
    capabilities=(*DAEMON, "SYS_ADMIN", "SYS_CHROOT"),  # the login's jail mounts, chroot
    targets=("k8s",),  # local: `invoke gpu-check`
    when=_health_check,
)
