"""The `local` target's renderer (local/run.py runs it): the cluster as a Docker Compose file, valid
for `docker compose` v2 and `docker-compose` v1 (the Compose Specification, which v1 reads as
file format 3.9 when no `version` is given, and v2 warns about on every command when one is;
no feature either lacks).

A service per role the cluster runs (roles/): its record's image, command, published ports,
configuration directories (written beside the Compose file), secrets (bound read-only at
/run/secrets), its own data (a named volume) and the jail (a named volume); no service depends
on another (started_before says why, and what starts first). A compute node is one service
per Slurm node, named after it so that Compose's DNS resolves it. jail-populate has the profile
"setup", so `up` leaves it alone: `invoke deploy` runs the same image's populate itself (by
hand: `docker compose --profile setup run --rm jail-populate`).
Networks: the default one, which every service is on but the database and Prometheus; the
database's, an internal network it shares with slurmdbd alone; the management one, where
Prometheus is with what it scrapes (roles.networks_of).
Capabilities are granted per service, never --privileged: Docker's default set plus what the
role's record needs beyond it (SYS_ADMIN on the login node; SYS_NICE on the compute nodes, plus
their node set's, where the base layer adds SYS_ADMIN).
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

import hashlib
import os
from pathlib import Path
from typing import Any

from slurmforge import gpu_driver, jail_contract
from slurmforge.deploy import generated, portal, roles
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.local.gpu_assign import Assignment
from slurmforge.deploy.roles import GPU_METRICS_PORT as GPU_PORT
from slurmforge.deploy.roles import POPULATE, Role
from slurmforge.deploy.spec.model import Cluster, ClusterSpec, NodeSet
from slurmforge.errors import ConfigError, quote

JAIL_USR = jail_contract.ROOT + jail_contract.USR

ROLE_LABEL = "io.slurmforge.role"
CLUSTER_LABEL = "io.slurmforge.cluster"
JAIL_VOLUME = "jail"


def usr_volume(arch: str) -> str:
    """The volume that holds another arch's jail /usr (see jail_contract.PART_ENV)."""
    return f"{JAIL_VOLUME}-usr-{arch}"


IDENTITY_LABEL = "io.slurmforge.identity"  # SSSD reads its settings when the container starts
PORTAL_LABEL = "io.slurmforge.portal"  # the hub reads its settings when it starts
BOUND_LABEL = "io.slurmforge.bound"  # which files on this host its bind mounts are (below)


def _mount_caps(
    caps: list[str], *, runs_containers: bool = False, least_privilege: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"cap_drop": ["ALL"]} if least_privilege else {}
    if caps:
        out["cap_add"] = caps
    opts = ["apparmor:unconfined"] if "SYS_ADMIN" in caps else []
    if runs_containers:
        opts.append("seccomp:unconfined")
    if least_privilege:
        opts.append("no-new-privileges:true")
    if opts:
        out["security_opt"] = opts
    return out


def _networks(running: list[Role]) -> dict[str, Any]:
    """The networks besides the default one, as the Compose file declares them; an internal one
    (roles.INTERNAL_NETS) reaches nothing outside, nor is it reached but by its members."""
    used = {n for r in running for n in roles.networks_of(r, running)} - {roles.CLUSTER_NET}
    declared = {n: {"internal": True} if n in roles.INTERNAL_NETS else {} for n in sorted(used)}
    return {"networks": declared} if used else {}


def _service_networks(role: Role, spec: ClusterSpec, running: list[Role]) -> dict[str, Any]:
    """A service's networks, where it is on other than the default one alone, and the groups
    of the secrets it mounts that a group may read (roles.Secret.group)."""
    networks = roles.networks_of(role, running)
    out = {} if networks == (roles.CLUSTER_NET,) else {"networks": list(networks)}
    groups = sorted({s.group for s in role.mounted_secrets(spec) if s.group is not None})
    return {**out, "group_add": [str(g) for g in groups]} if groups else out


def _gpu(assignment: Assignment, node: str) -> dict[str, Any]:
    """A GPU node's driver files (read-only) and device nodes: its own GPUs and the shared ones."""
    if assignment.driver is None or node not in assignment.nodes:
        return {}
    devices = (*assignment.shared_devices(), *assignment.nodes[node])
    return {
        "volumes": [f"{m.host}:{m.container}:ro" for m in assignment.driver.mounts],
        "devices": [f"{d.host}:{d.container}:rwm" for d in devices],
    }


class ComposeRenderer:
    """``secrets``: file name (roles.SECRETS) → the file on this host, bound read-only into the
    containers that mount it; never an environment variable."""

    def __init__(
        self,
        cluster: Cluster,
        secrets: dict[str, Path],
        jail_id: str,
        gpus: Assignment,
        directory: Path | None = None,
    ) -> None:
        self.cluster = cluster
        self.directory = directory  # where the Compose file is written: its ./ paths' base
        self.spec = cluster.spec
        self.secrets = secrets
        self.jail_id = jail_id
        self.gpus = gpus
        self.running = roles.running(cluster.spec, "local")
        # what SSSD is given, once for every service that reads it
        self.identity_digest = (
            sssd.digest(cluster.spec, cluster.path) if sssd.ldap_of(cluster.spec) else ""
        )

    def render(self) -> dict[str, Any]:
        services: dict[str, Any] = {}
        for role in self.running:
            if role.workload == "nodes":
                for ns, node in self.cluster.nodes:
                    services[node] = self.node(role, ns, node)
            else:  # a backup slurmctld is a second service of the role, on the same volume
                for name in service_names(self.cluster, role):
                    services[name] = self.service(role, name, self.cluster.images[role.image])
            if role.name == roles.EXPORTER:
                services.update(self.gpu_metrics(role))
        volumes: dict[str, Any] = {JAIL_VOLUME: {}}
        volumes.update({usr_volume(arch): {} for arch in self.cluster.other_arches})
        volumes.update({r.data.local: {} for r in self.running if r.data})
        if roles.elastic(self.spec):
            volumes[roles.POWER_VOLUME] = {}
        return {"services": services, "volumes": volumes}

    def service(
        self, role: Role, name: str, image: str, command: tuple[str, ...] | None = None, **more
    ) -> dict[str, Any]:
        """The role's service; ``more``: extra capabilities, environment, volumes, labels."""
        job = role.workload == "job"
        service: dict[str, Any] = {"image": image}
        service.update({"profiles": ["setup"]} if job else {"hostname": name, "init": True})
        command = role.command if command is None else command
        if command:
            service["command"] = list(command)
        caps = (
            sorted(role.capabilities)
            if role.least_privilege
            else role.added_capabilities(more.get("capabilities", ()))
        )
        service.update(
            _mount_caps(
                caps, runs_containers=role.runs_containers, least_privilege=role.least_privilege
            )
        )
        ports = [self.publish(p) for p in role.ports if p.publish]
        if ports:
            service["ports"] = ports
        env = {**role.env(self.spec), **self.env(role), **more.get("env", {})}
        if env:
            service["environment"] = env
        service["volumes"] = [*self.volumes(role), *more.get("volumes", [])]
        service["labels"] = {
            CLUSTER_LABEL: self.cluster.name,
            ROLE_LABEL: role.name,
            **more.get("labels", {}),
        }
        if roles.IDENTITY_CONF in role.mounted_configs(self.spec):
            service["labels"][IDENTITY_LABEL] = self.identity_digest
        bound = bound_files(self.directory, service["volumes"])
        if bound:
            service["labels"][BOUND_LABEL] = bound
        if roles.PORTAL_CONF in role.mounted_configs(self.spec):
            settings = "".join(portal.files(self.cluster).values()).encode()
            service["labels"][PORTAL_LABEL] = hashlib.sha256(settings).hexdigest()
        service["restart"] = "no" if job else "unless-stopped"
        return service

    def node(self, role: Role, ns: NodeSet, node: str) -> dict[str, Any]:
        driver = _gpu(self.gpus, node)
        arch = self.cluster.arch(ns)
        # a node of another arch than the jail's sees the jail with that arch's /usr
        usr = [] if arch == self.cluster.cell.arch else [f"{usr_volume(arch)}:{JAIL_USR}"]
        command = tuple(node if a == "{node}" else a for a in role.command)
        if node in ns.elastic_nodes:
            # a container shares its host's kernel, and with it the boot time slurmd reports:
            # Slurm waits for a resumed node to have booted since it asked, so slurmd reports
            # its own start as the node's boot (-b)
            command = (*command, "-b")
        service = self.service(
            role,
            node,
            self.cluster.node_image(ns),
            command,
            capabilities=ns.capabilities,
            env=dict(ns.env),
            volumes=[*usr, *driver.get("volumes", [])],
            labels={"io.slurmforge.nodeset": ns.name},
        )
        if ns.arch is not None:
            service["platform"] = f"linux/{arch}"
        if driver:
            service["devices"] = driver["devices"]
        return service

    def gpu_metrics(self, role: Role) -> dict[str, Any]:
        """Beside each GPU node whose driver was found: the exporter's GPU collector, with the
        node's driver files (read-only) and GPU devices."""
        out = {}
        for node in gpu_metrics_nodes(self.cluster, self.gpus):
            driver = _gpu(self.gpus, node)
            name = f"{node}-gpu-metrics"
            command = (*role.command[:-1], "gpu", "--node", node, "--listen", f":{GPU_PORT}")
            service = self.service(
                role,
                name,
                self.cluster.images[role.image],
                command,
                env={"LD_LIBRARY_PATH": gpu_driver.CONTAINER_LIB},
                volumes=driver["volumes"],
            )
            service["devices"] = driver["devices"]
            out[name] = service
        return out

    def env(self, role: Role) -> dict[str, str]:
        configs = role.mounted_configs(self.spec)
        env = {var: f"{c.path}/{file}" for c in configs if c.env for var, file in [c.env]}
        if role.name == POPULATE:
            spec = self.spec
            env.update(jail_contract.populate_env(self.jail_id, spec.kept, skip=spec.skipped))
        return env

    def volumes(self, role: Role) -> list[str]:
        out = [f"./{c.local}:{c.path}:ro" for c in role.mounted_configs(self.spec)]
        out += [
            f"{self.secrets[s.file]}:{roles.LOCAL_SECRETS_DIR}/{s.file}:ro"
            for s in role.mounted_secrets(self.spec)
        ]
        if role.data:
            out.append(f"{role.data.local}:{role.data.path}")
        if role.jail:
            mode = ":ro" if role.jail == "ro" else ""
            out.append(f"{JAIL_VOLUME}:{jail_contract.ROOT}{mode}")
        if role.runs_users:  # site storage, inside the jail where sessions and jobs see it
            out += [
                f"{m.host_path}:{jail_contract.ROOT}{m.path}{':ro' if m.read_only else ''}"
                for m in self.spec.mounts
            ]
        if roles.elastic(self.spec) and role.name in (roles.CONTROLLER, roles.NODE_POWER):
            # slurmctld's power programs leave their requests here for the agent
            out.append(f"{roles.POWER_VOLUME}:{roles.POWER_SPOOL}")
        if role.name == roles.NODE_POWER:  # the one service that reaches the engine
            socket = docker_socket()
            out.append(f"{socket}:{socket}")
        return out

    def publish(self, port: roles.Port) -> str:
        """A published port on the login address."""
        host = url_host(self.spec.login.address)
        return f"{host}:{roles.published(self.spec, port)}:{port.number}"


def service_names(cluster: Cluster, role: Role) -> list[str]:
    """The services of ``role`` that deploy starts (not an elastic set's nodes: Slurm does)."""
    if role.workload == "nodes":
        return [node for _, node in cluster.fixed_nodes]
    if role.name == roles.CONTROLLER:
        return roles.controllers(cluster.spec)
    return [role.name]


def started_before(cluster: Cluster, name: str) -> list[str]:
    """The services to bring up before role ``name``'s: those of the roles it is after (roles'
    ``after``, followed through). The controller's are its nodes above all, since
    slurmctld resolves every node's name as it starts and a container's name resolves only while
    it runs; slurmdbd's, its database.

    The Compose file holds no ``depends_on``: Compose v2 makes a service again whenever one it
    depends on is made again (a new controller took the login node and its users' sessions with
    it), and an ``up`` of some services gives one whose dependency is left out a definition
    without it, which differs from the file's (the `up` of everything but the nodes a roll
    replaces after their jobs made the controller and the login node again)."""
    running = {role.name: role for role in roles.running(cluster.spec, "local")}
    wanted, todo = set(), [name]
    while todo:
        for after in running[todo.pop()].after:
            if after in running and after not in wanted:
                wanted.add(after)
                todo.append(after)
    return [s for n in running if n in wanted for s in service_names(cluster, running[n])]


def url_host(address: str) -> str:
    """An address as a URL or a port mapping writes it: an IPv6 one in brackets."""
    return f"[{address}]" if ":" in address else address


def bound_files(directory: Path | None, volumes: list[str]) -> str:
    """Which files and directories on this host a service's bind mounts are (their inodes).
    A container keeps what it was started with: where one was replaced since (a directory
    deleted and written again, a new checkout at the same path, a secret made again, the
    engine's socket after a restart of the engine), the container must be made again, and
    Compose makes again a service whose labels changed. Empty without a directory (a render
    that is not written): ``directory`` is where the Compose file is, its ./ paths' base."""
    if directory is None:
        return ""
    found = []
    for volume in volumes:
        source = volume.split(":", 1)[0]
        if not source.startswith(("./", "/")):
            continue  # a named volume
        try:
            inode = (directory / source).stat().st_ino  # an absolute source stays so
        except FileNotFoundError:
            continue  # Docker makes a missing source a directory, at the container's start
        found.append(f"{source} {inode}")
    return hashlib.sha256("\n".join(found).encode()).hexdigest()[:16] if found else ""


def docker_socket() -> str:
    """The Docker engine's Unix socket on this host (DOCKER_HOST's, else Docker's default)."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        raise ConfigError(
            f"$DOCKER_HOST {quote(host)}: elastic node sets are started and stopped through the "
            "Docker engine's Unix socket on this host, and this engine is reached otherwise",
            hint="deploy from the engine's own host, or leave elastic out of the node sets",
        )
    return host.removeprefix("unix://")


def gpu_metrics_nodes(cluster: Cluster, gpus: Assignment) -> list[str]:
    """The nodes whose GPUs the exporter's GPU collector reads: those given a driver and GPUs."""
    if gpus.driver is None or not cluster.spec.metrics.enabled:
        return []
    return [node for _, node in cluster.nodes if node in gpus.nodes]


def render(
    cluster: Cluster,
    secrets: dict[str, Path],
    jail_id: str,
    gpus: Assignment | None = None,
    directory: Path | None = None,
) -> dict[str, Any]:
    """The Compose file's data for ``cluster``; ``directory``: where it is written (its services
    are then labelled with what their bind mounts are, ComposeRenderer.bound)."""
    renderer = ComposeRenderer(cluster, secrets, jail_id, gpus or Assignment(), directory)
    data = renderer.render()
    for service in data["services"].values():
        role = roles.role(service["labels"][ROLE_LABEL])
        service.update(_service_networks(role, cluster.spec, renderer.running))
    return {**data, **_networks(renderer.running)}


def dump(compose: dict[str, Any], source: str) -> str:
    return generated.dump_yaml(compose, source)
