"""The `local` target's renderer (local_run.py runs it): the cluster as a Docker Compose file, valid
for `docker compose` v2 and `docker-compose` v1 (file format 3.8, no features either lacks).

Services: slurmctld, login, one per compute node (named after the Slurm node, so Compose's DNS
resolves it), with accounting slurmdbd and (unless the cluster names an external database)
mariadb on the volume "accounting", slurmrestd published on the login address, and
jail-populate (profile "setup", so `up` leaves it alone: `invoke deploy` runs the same image's
populate itself; by hand: `docker-compose --profile setup run --rm jail-populate`).
Capabilities are granted per service, never --privileged:
- compute nodes get their node set's capabilities; the built-in base layer gives SYS_ADMIN, which
  the jail SPANK plugin needs for a private mount namespace and its mounts; and SYS_NICE, with
  which slurmstepd binds a task to its CPUs once the task runs as its user (NODE_CAPABILITIES);
- login gets SYS_ADMIN: sshd chroots sessions into the jail, which needs /proc, /dev, the munge
  socket and the client config mounted inside it (jail-mounts.sh);
- slurmctld and jail-populate get Docker's defaults only.
GPU nodes also get the host driver's files, each mounted read-only (Compose cannot add nosuid or
nodev to a bind mount; the projection into the jail does), and their own GPU device nodes plus
the shared control devices.
Where SYS_ADMIN is granted, AppArmor's default Docker profile (which denies mount) is lifted. The
default seccomp profile stays on login (it allows mount(2) to holders of SYS_ADMIN) but not on
compute nodes: containers in jobs (enroot, through pyxis) enter their root with pivot_root(2)
from inside a user namespace, which that profile refuses to everyone. A node then filters system
calls as a bare-metal node does: not at all; its capabilities stay its node set's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmforge import jail_contract
from slurmforge.deploy import generated, slurmconf
from slurmforge.deploy.gpu_assign import Assignment
from slurmforge.deploy.model import (
    CONTROLLER,
    DATABASE,
    DBD,
    JAIL,
    LOGIN,
    NODE_CAPABILITIES,
    RESTD,
    Cluster,
)

POPULATE = "jail-populate"
ROLE_LABEL = "io.slurmforge.role"
CLUSTER_LABEL = "io.slurmforge.cluster"
NODE_CONF, JAIL_CONF = "etc/slurm", "jail/etc/slurm"  # relative to the compose file
DBD_CONF = "etc/slurmdbd"  # slurmdbd.conf without its password
SECRETS_DIR = "/run/secrets"  # where every container finds its secret files (read-only)
ACCOUNTING_VOLUME = "accounting"  # the cluster's own MariaDB's data


def _mount_caps(caps: list[str], *, runs_containers: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if caps:
        out["cap_add"] = caps
    opts = ["apparmor:unconfined"] if "SYS_ADMIN" in caps else []
    if runs_containers:
        opts.append("seccomp:unconfined")
    if opts:
        out["security_opt"] = opts
    return out


def _gpu(assignment: Assignment, node: str) -> dict[str, Any]:
    """A GPU node's driver files (read-only) and device nodes: its own GPUs and the shared ones."""
    if assignment.driver is None or node not in assignment.nodes:
        return {}
    devices = (*assignment.shared_devices(), *assignment.nodes[node])
    return {
        "volumes": [f"{m.host}:{m.container}:ro" for m in assignment.driver.mounts],
        "devices": [f"{d.host}:{d.container}:rwm" for d in devices],
    }


def render(
    cluster: Cluster, secrets: dict[str, Path], jail_id: str, gpus: Assignment | None = None
) -> dict[str, Any]:
    """``secrets``: name (munge.key, jwt_hs256.key, db-password) → the file on this host, bound
    read-only into the containers that need it; never an environment variable."""
    gpus = gpus or Assignment()

    def secret(name: str) -> str:
        return f"{secrets[name]}:{SECRETS_DIR}/{name}:ro"

    key = secret("munge.key")
    node_conf = f"./{NODE_CONF}:/etc/slurm:ro"
    jail_conf = f"./{JAIL_CONF}:{slurmconf.JAIL_CONF}:ro"
    jail = f"jail:{slurmconf.JAIL_ROOT}"

    accounting = cluster.spec.accounting
    dbd = [DBD] if accounting.enabled else []

    def labels(role: str, **extra: str) -> dict[str, str]:
        return {CLUSTER_LABEL: cluster.name, ROLE_LABEL: role, **extra}

    services: dict[str, Any] = {
        CONTROLLER: {
            "image": cluster.images[CONTROLLER],
            "hostname": CONTROLLER,
            "init": True,
            "command": ["slurmctld", "-D"],
            "volumes": [
                node_conf,
                key,
                *([secret("jwt_hs256.key")] if accounting.enabled else []),
                f"state:{slurmconf.STATE_DIR}",
                f"{jail}:ro",
            ],
            "labels": labels(CONTROLLER),
            # nodes first: slurmctld resolves every node name when it starts (slurmd retries
            # until the controller answers)
            **(
                {"depends_on": [node for _, node in cluster.nodes] + dbd}
                if cluster.nodes or dbd
                else {}
            ),
            "restart": "unless-stopped",
        },
        LOGIN: {
            "image": cluster.images[LOGIN],
            "hostname": LOGIN,
            "init": True,
            "command": ["/usr/sbin/sshd", "-D", "-e"],
            **_mount_caps(["SYS_ADMIN"]),
            "ports": [f"{_host(cluster.spec.login.address)}:{cluster.spec.login.port}:22"],
            "volumes": [node_conf, jail_conf, key, jail],
            **(
                {"environment": {jail_contract.SCRATCH_ENV: " ".join(cluster.spec.jail.scratch)}}
                if cluster.spec.jail.scratch
                else {}
            ),
            "labels": labels(LOGIN),
            "depends_on": [CONTROLLER],
            "restart": "unless-stopped",
        },
    }
    for ns, node in cluster.nodes:
        driver = _gpu(gpus, node)
        service: dict[str, Any] = {
            "image": cluster.images[ns.image],
            "hostname": node,
            # an init reaps what job steps leave behind (slurmd as PID 1 would not)
            "init": True,
            "command": ["slurmd", "-D", "-N", node],
            **_mount_caps(sorted({*ns.capabilities, *NODE_CAPABILITIES}), runs_containers=True),
            "volumes": [node_conf, jail_conf, key, jail, *driver.get("volumes", [])],
            **({"devices": driver["devices"]} if driver else {}),
            "labels": labels("node", **{"io.slurmforge.nodeset": ns.name}),
            "restart": "unless-stopped",
        }
        if ns.env:
            service["environment"] = dict(ns.env)
        services[node] = service
    if accounting.enabled:
        services[DBD] = {
            "image": cluster.images[DBD],
            "hostname": DBD,
            "init": True,
            "command": ["slurmdbd", "-D"],
            "volumes": [
                f"./{DBD_CONF}/slurmdbd.conf:/etc/slurmforge/slurmdbd.conf:ro",
                key,
                secret("jwt_hs256.key"),
                secret("db-password"),
                f"{jail}:ro",  # user names resolve as on the nodes (the jail's accounts)
            ],
            "labels": labels(DBD),
            **({"depends_on": [DATABASE]} if accounting.database is None else {}),
            "restart": "unless-stopped",
        }
    if accounting.enabled and accounting.database is None:
        services[DATABASE] = {
            "image": cluster.images[DATABASE],
            "hostname": DATABASE,
            "init": True,
            "volumes": [f"{ACCOUNTING_VOLUME}:/var/lib/mysql", secret("db-password")],
            "labels": labels(DATABASE),
            "restart": "unless-stopped",
        }
    if cluster.spec.rest.enabled:
        rest = cluster.spec.rest
        services[RESTD] = {
            "image": cluster.images[RESTD],
            "hostname": RESTD,
            "init": True,
            "ports": [f"{_host(cluster.spec.login.address)}:{rest.port}:6820"],
            "volumes": [node_conf, key, f"{jail}:ro"],
            "labels": labels(RESTD),
            "depends_on": [CONTROLLER],
            "restart": "unless-stopped",
        }
    services[POPULATE] = {
        "image": cluster.images[JAIL],
        "profiles": ["setup"],
        "command": [slurmconf.JAIL_ROOT],
        "environment": jail_contract.populate_env(jail_id, cluster.spec.jail.kept),
        "volumes": [jail],
        "labels": labels(POPULATE),
        "restart": "no",
    }
    volumes: dict[str, Any] = {"jail": {}, "state": {}}
    if DATABASE in services:
        volumes[ACCOUNTING_VOLUME] = {}
    return {"version": "3.8", "services": services, "volumes": volumes}


def dump(compose: dict[str, Any], source: str) -> str:
    return generated.dump_yaml(compose, source)


def _host(address: str) -> str:
    """An address as a Compose port mapping writes it (an IPv6 one in brackets)."""
    return f"[{address}]" if ":" in address else address
