"""What the local target checks before a deploy, scale or restore changes anything: the images
are built, the published ports are free, the database takes the kept password, the site's
settings and mounts fit this host, the GPU node sets fit its GPUs, and the Slurm series may
follow the running one."""

from __future__ import annotations

import functools
import socket
from pathlib import Path

from slurmforge import state
from slurmforge.deploy import roles
from slurmforge.deploy.local import gpu_assign, render
from slurmforge.deploy.local.compose import Project
from slurmforge.deploy.roles import CONTROLLER
from slurmforge.deploy.slurm import database as accounting_db
from slurmforge.deploy.slurm import siteconf, upgrade
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import ConfigError

# Linux's bridge takes at most 1024 ports (BR_MAX_PORTS), one per container on a Docker network
# and one for the bridge's own side: the containers the cluster's network can hold
BRIDGE_CONTAINERS = 1023


def fits_one_network(cluster: Cluster) -> None:
    """Refuse a cluster whose containers on its own network (every node, elastic ones at their
    most, and the services there) are more than a Docker bridge network holds."""
    spec = cluster.spec
    nodes = len(cluster.nodes)
    services = sum(
        len(roles.controllers(spec)) if role.name == CONTROLLER else 1
        for role in roles.running(spec, "local")
        if role.workload == "daemon" and roles.CLUSTER_NET in role.networks
    )
    if nodes + services > BRIDGE_CONTAINERS:
        raise ConfigError(
            f"{cluster.path}: nodesets: {nodes} nodes and {services} "
            "services on the cluster's network; a Docker bridge network holds at most "
            f"{BRIDGE_CONTAINERS} containers (Linux's bridge port limit)",
            hint="deploy it with --target k8s, or give the local target fewer nodes",
        )


class Preflight:
    def __init__(self, cluster: Cluster, project: Project) -> None:
        self.cluster = cluster
        self.project = project
        self.engine = project.engine

    def everything(self) -> tuple[bool, dict[str, str]]:
        """Every check, in this order: whether the deploy changes the Slurm series (before
        anything, even before the images are looked up), the network's size, the GPUs, the
        database, the ports, the Docker socket of elastic node sets' agent, the images (their
        IDs), the site's settings."""
        upgrading = self.upgrade()
        fits_one_network(self.cluster)
        _ = self.gpus  # GPU node sets without GPUs are refused before anything happens
        self.database()
        self.ports()
        if roles.elastic(self.cluster.spec):  # the node-power agent mounts the engine's socket
            render.docker_socket()
        ids = self.image_ids()
        self.site()
        return upgrading, ids

    @functools.cached_property
    def gpus(self) -> gpu_assign.Assignment:
        """Which of this host's GPUs each node gets; more than it has is refused."""
        return gpu_assign.assign(self.cluster)

    def image_ids(self) -> dict[str, str]:
        """Component → the ID of its built image; an image not built is refused, naming the
        build that makes it."""
        ids = {}
        for component, ref in self.cluster.images.items():
            info = self.engine.inspect(ref)
            if info is None:
                raise ConfigError(
                    f"image {ref} ({component}) is not built",
                    hint=f"run: {self.cluster.build_hint}",
                )
            ids[component] = info.id
        return ids

    def ports(self) -> None:
        """The published ports (login's sshd, slurmrestd) are free, or already ours."""
        spec = self.cluster.spec
        wanted = [
            (port.publish, role.name, roles.published(spec, port))
            for role in roles.running(spec, "local")
            for port in role.ports
            if port.publish
        ]
        for key, service, port in wanted:
            mine = self.project.running(service)  # as the engine lists it: with its ports
            if mine is not None and any(
                p.get("PublicPort") == port for p in mine.attrs.get("Ports") or []
            ):
                continue
            family = socket.AF_INET6 if ":" in spec.login.address else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((spec.login.address, port))
                except OSError as exc:
                    raise ConfigError(
                        f"{self.cluster.path}: {key}: {spec.login.address}:{port} is not free "
                        f"({exc.strerror})",
                        hint=f"choose another {key}, or stop what listens there",
                    ) from None

    def database(self) -> None:
        """Refuse, before anything is made or started, a database slurmdbd could not use: an
        external one whose host does not resolve, refuses connections or refuses its login, or
        the cluster's own whose volume was created with a password other than the one kept for
        it."""
        if not accounting_db.runs_own_database(self.cluster):
            return
        where = self.engine.volume_path(f"{self.cluster.name}_{roles.DATABASE_DATA.local}")
        if where is not None:
            accounting_db.check_password(
                self.cluster, Path(where), state.cluster_dir(self.cluster.name) / "db-password"
            )

    def site(self) -> None:
        """The cluster file's Slurm settings and mounts, as this target can apply them."""
        siteconf.check_cluster(self.cluster, self.engine)
        for i, mount in enumerate(self.cluster.spec.mounts):
            if mount.claim is not None:
                raise ConfigError(
                    f"{self.cluster.path}: mounts[{i}].claim: a PersistentVolumeClaim exists only "
                    "on --target k8s",
                    hint="give host_path: a directory of this host",
                )
            if not Path(mount.host_path or "").is_dir():
                raise ConfigError(
                    f"{self.cluster.path}: mounts[{i}].host_path: no directory "
                    f"{mount.host_path} on this host"
                )

    def upgrade(self) -> bool:
        """Refuse a Slurm release this cluster's daemons cannot move to from the one they run
        (upgrade.check); True when the deploy changes its Slurm series."""
        container = self.project.container(CONTROLLER)
        running = container.labels.get("io.slurmforge.slurm") if container else None
        if not running:
            return False
        return upgrade.check_cluster(self.cluster, running)
