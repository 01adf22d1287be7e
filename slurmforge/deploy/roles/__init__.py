"""The roles a cluster runs, declared once for every deploy target: the registry.

A role is one kind of container in a cluster: the controller, a compute node, the login node,
slurmdbd and its database, the REST API, the jail populate, the GPU health check. Its record
(records.py) says what it is (image, command, ports, readiness), what it is given (secrets,
configuration directories, the jail, its own data, capabilities, resources) and when a cluster
runs it. The renderers (local/render.py, k8s/render.py) and runners (local/run.py, k8s/run.py)
translate the records into their target's objects; nothing there restates them.

Each feature declares its own roles, secrets, configuration and data in its module here:
slurm.py (Slurm's own roles; base.py holds what every cluster has and the others name),
accounting.py, identity.py, monitoring.py, power.py, node_watch.py, portal.py, health.py,
backup.py. This module assembles them (ROLES, SECRETS, CONFIGS) and answers what a cluster runs.

- Where to add a role: a `Role` in its feature's module, listed in that module's ROLES and in
  ROLES below (whose order is the order the targets write them in), and its image under
  images/. Both targets then render it (a Compose service; a StatefulSet or Deployment with its
  Services on Kubernetes), mount what it names, and wait for its readiness probe.
- Where to add a secret: a `Secret` in its feature's module, in SECRETS below, and named in
  each role that mounts it. It is made at the first deploy (local: a file in the cluster's
  state directory; k8s: a Secret) and never written into a generated file.
- Where a role needs more than the generic translation (a compute node's per-node services and
  GPUs, slurmdbd's wait for its database), that target's renderer has a hook named after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slurmforge.deploy.identity import sssd
from slurmforge.deploy.roles.accounting import (
    DATABASE,
    DATABASE_DATA,
    DATABASE_ROLE,
    DB_PASSWORD,
    DBD,
    DBD_CONF,
    DBD_ROLE,
    JWT,
    OWN_DB_NAME,
    OWN_DB_USER,
    RESTD,
    RESTD_ROLE,
    own_database,
)
from slurmforge.deploy.roles.backup import (
    BACKUP,
    BACKUP_CONF,
    BACKUP_ROLE,
)
from slurmforge.deploy.roles.base import (
    CONTROLLER,
    CONTROLLER_BACKUP,
    CONTROLLER_STATE,
    JAIL,
    JAIL_CONF,
    LOGIN,
    MUNGE,
    NODE,
    POPULATE,
    SLURM_CONF,
)
from slurmforge.deploy.roles.health import (
    HEALTH_CHECK,
    HEALTH_CHECK_ROLE,
)
from slurmforge.deploy.roles.identity import (
    DIRECTORY,
    DIRECTORY_CONF,
    DIRECTORY_DATA,
    DIRECTORY_ROLE,
    IDENTITY_CONF,
    LDAP_BIND,
)
from slurmforge.deploy.roles.monitoring import (
    EXPORTER,
    EXPORTER_PORT,
    EXPORTER_ROLE,
    EXPORTER_USER,
    GPU_METRICS_PORT,
    METRICS_TOKEN,
    PROMETHEUS,
    PROMETHEUS_CONF,
    PROMETHEUS_DATA,
    PROMETHEUS_ROLE,
)
from slurmforge.deploy.roles.node_watch import (
    NODE_WATCH,
    NODE_WATCH_ROLE,
    TOPOLOGY_CONFIG,
    labelled,
)
from slurmforge.deploy.roles.portal import (
    PORTAL,
    PORTAL_API,
    PORTAL_CONF,
    PORTAL_COOKIE,
    PORTAL_DATA,
    PORTAL_DB,
    PORTAL_PROXY,
    PORTAL_ROLE,
    PORTAL_TLS,
)
from slurmforge.deploy.roles.power import (
    NODE_POWER,
    NODE_POWER_ROLE,
    POWER_SPOOL,
    POWER_VOLUME,
    elastic,
)
from slurmforge.deploy.roles.records import (
    CLUSTER_NET,
    DAEMON,
    DATABASE_NET,
    DOCKER_DEFAULT_CAPABILITIES,
    INTERNAL_NETS,
    LOCAL_SECRETS_DIR,
    MANAGEMENT_NET,
    CertificateSecret,
    ConfigDir,
    Data,
    Port,
    Probe,
    Resources,
    Role,
    Secret,
    Workload,
)
from slurmforge.deploy.roles.slurm import (
    CONTROLLER_ROLE,
    LOGIN_ROLE,
    NODE_ROLE,
    POPULATE_ROLE,
)

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec

ROLES: tuple[Role, ...] = (
    CONTROLLER_ROLE,
    NODE_ROLE,
    LOGIN_ROLE,
    DIRECTORY_ROLE,
    DATABASE_ROLE,
    DBD_ROLE,
    RESTD_ROLE,
    EXPORTER_ROLE,
    NODE_POWER_ROLE,
    NODE_WATCH_ROLE,
    PROMETHEUS_ROLE,
    PORTAL_ROLE,
    POPULATE_ROLE,
    HEALTH_CHECK_ROLE,
    BACKUP_ROLE,
)
SECRETS = {
    s.file: s
    for s in (
        *(MUNGE, JWT, DB_PASSWORD, LDAP_BIND),
        *(PORTAL_COOKIE, PORTAL_PROXY, PORTAL_TLS, METRICS_TOKEN),
    )
}

CONFIGS = (
    SLURM_CONF, JAIL_CONF, DBD_CONF, PROMETHEUS_CONF, IDENTITY_CONF, DIRECTORY_CONF, BACKUP_CONF,
    PORTAL_CONF,
)  # fmt: skip

BY_NAME = {r.name: r for r in ROLES}

# what never runs as a node set's image
SERVICE_IMAGES = frozenset(r.image for r in ROLES if r.image) | {JAIL}


def role(name: str) -> Role:
    return BY_NAME[name]


def running(spec: ClusterSpec, target: str | None = None) -> list[Role]:
    """The roles ``spec``'s cluster runs (on ``target``, or on either), in ROLES' order."""
    return [r for r in ROLES if r.when(spec) and (target is None or target in r.targets)]


def networks_of(role: Role, running: list[Role]) -> tuple[str, ...]:
    """The networks ``role`` is on in a cluster running ``running``: CLUSTER_NET where it is
    one of its networks, and any other it shares with another role that runs."""
    return tuple(
        n
        for n in role.networks
        if n == CLUSTER_NET or any(n in r.networks for r in running if r.name != role.name)
    )


def controllers(spec: ClusterSpec) -> list[str]:
    """The local target's slurmctld services (and host names), the primary first."""
    return [CONTROLLER, CONTROLLER_BACKUP][: spec.controller.replicas]


def cluster_secrets(spec: ClusterSpec) -> dict[Secret, Path | None]:
    """The secrets the cluster's roles mount, in SECRETS' order → the site's file each comes
    from (an external database's password, a site directory's bind password), or None for one
    slurmforge makes once."""
    used = {s for r in running(spec) for s in r.mounted_secrets(spec)}
    db = spec.accounting.database
    ldap = sssd.ldap_of(spec)
    sources = {
        DB_PASSWORD: db.password_secret if db else None,
        LDAP_BIND: ldap.bind_password_file if ldap else None,
        PORTAL_TLS: spec.portal.tls_pem,
    }
    return {s: Path(sources[s]) if sources.get(s) else None for s in SECRETS.values() if s in used}


def published(spec: ClusterSpec, port: Port) -> int:
    """The port ``port`` is published on (its ``publish`` setting's value)."""
    return {
        "login.port": spec.login.port,
        "rest.port": spec.rest.port,
        "metrics.prometheus.port": spec.metrics.prometheus.port,
        "portal.port": spec.portal.port,
    }[port.publish or ""]


def images(spec: ClusterSpec) -> set[str]:
    """The components whose images the cluster runs (node sets' included)."""
    return {r.image for r in running(spec) if r.image} | {ns.image for ns in spec.nodesets}


__all__ = [
    "BACKUP",
    "BACKUP_CONF",
    "BACKUP_ROLE",
    "BY_NAME",
    "CLUSTER_NET",
    "CONFIGS",
    "CONTROLLER",
    "CONTROLLER_BACKUP",
    "CONTROLLER_ROLE",
    "CONTROLLER_STATE",
    "DAEMON",
    "DATABASE",
    "DATABASE_DATA",
    "DATABASE_NET",
    "DATABASE_ROLE",
    "DBD",
    "DBD_CONF",
    "DBD_ROLE",
    "DB_PASSWORD",
    "DIRECTORY",
    "DIRECTORY_CONF",
    "DIRECTORY_DATA",
    "DIRECTORY_ROLE",
    "DOCKER_DEFAULT_CAPABILITIES",
    "EXPORTER",
    "EXPORTER_PORT",
    "EXPORTER_ROLE",
    "EXPORTER_USER",
    "GPU_METRICS_PORT",
    "HEALTH_CHECK",
    "HEALTH_CHECK_ROLE",
    "IDENTITY_CONF",
    "INTERNAL_NETS",
    "JAIL",
    "JAIL_CONF",
    "JWT",
    "LDAP_BIND",
    "LOCAL_SECRETS_DIR",
    "LOGIN",
    "LOGIN_ROLE",
    "MANAGEMENT_NET",
    "METRICS_TOKEN",
    "MUNGE",
    "NODE",
    "NODE_POWER",
    "NODE_POWER_ROLE",
    "NODE_ROLE",
    "NODE_WATCH",
    "NODE_WATCH_ROLE",
    "OWN_DB_NAME",
    "OWN_DB_USER",
    "POPULATE",
    "POPULATE_ROLE",
    "PORTAL",
    "PORTAL_API",
    "PORTAL_CONF",
    "PORTAL_COOKIE",
    "PORTAL_DATA",
    "PORTAL_DB",
    "PORTAL_PROXY",
    "PORTAL_ROLE",
    "PORTAL_TLS",
    "POWER_SPOOL",
    "POWER_VOLUME",
    "PROMETHEUS",
    "PROMETHEUS_CONF",
    "PROMETHEUS_DATA",
    "PROMETHEUS_ROLE",
    "RESTD",
    "RESTD_ROLE",
    "ROLES",
    "SECRETS",
    "SERVICE_IMAGES",
    "SLURM_CONF",
    "TOPOLOGY_CONFIG",
    "CertificateSecret",
    "ConfigDir",
    "Data",
    "Port",
    "Probe",
    "Resources",
    "Role",
    "Secret",
    "Workload",
    "cluster_secrets",
    "controllers",
    "elastic",
    "images",
    "labelled",
    "networks_of",
    "own_database",
    "published",
    "role",
    "running",
]
