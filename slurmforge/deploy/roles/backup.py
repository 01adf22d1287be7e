"""Scheduled backups (kubernetes.backup.schedule): the backup job and the plan it follows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge.deploy.roles.accounting import DATABASE, DB_PASSWORD, JWT
from slurmforge.deploy.roles.base import MUNGE
from slurmforge.deploy.roles.identity import LDAP_BIND
from slurmforge.deploy.roles.monitoring import METRICS_TOKEN
from slurmforge.deploy.roles.records import CLUSTER_NET, DATABASE_NET, ConfigDir, Resources, Role

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


BACKUP = "backup"


def _scheduled(spec: ClusterSpec) -> bool:
    return spec.kubernetes.backup.schedule is not None


# what the scheduled backup copies (snapshot.Plan, as plan.json)
BACKUP_CONF = ConfigDir("backup-config", "etc/backup", "/etc/slurmforge/backup", when=_scheduled)

BACKUP_ROLE = Role(
    BACKUP,
    # the database image: mariadb-dump of the server's own release, and python3 with
    # snapshot.py (the renderer gives the command, the claims it reads and where it writes)
    image=DATABASE,
    workload="schedule",
    secrets=(MUNGE, JWT, DB_PASSWORD, LDAP_BIND, METRICS_TOKEN),
    configs=(BACKUP_CONF,),
    jail="ro",
    capabilities=("DAC_READ_SEARCH",),  # reads every user's files and slurm's state, as root
    networks=(CLUSTER_NET, DATABASE_NET),  # mariadb-dump reaches the database's port
    resources=Resources(("100m", "128Mi"), ("1", "512Mi")),
    targets=("k8s",),  # local: `invoke backup`
    when=_scheduled,
)
