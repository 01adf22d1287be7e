"""The typed deployment model: one cluster, its node sets, partitions, images, volumes, secrets.

Loaded from a cluster file (deploy/cluster.yaml by default) whose node sets may use layered
``definitions`` (see layers.py). The same model feeds the Slurm configuration and every target's
renderer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    field_validator,
)

from slurmforge import matrix, refs
from slurmforge.deploy.spec.disruption import DisruptionSpec
from slurmforge.deploy.spec.fields import (
    NODE_DIRS,
    AbsPath,
    DNSName,
)
from slurmforge.deploy.spec.health import HealthSpec
from slurmforge.deploy.spec.identity import IdentitySpec
from slurmforge.deploy.spec.kubernetes import KubernetesSpec
from slurmforge.deploy.spec.nodeset import NodeSet
from slurmforge.deploy.spec.portal import PortalSpec
from slurmforge.deploy.spec.services import AccountingSpec, MetricsSpec, RestSpec
from slurmforge.deploy.spec.site import (
    ConfKey,
    ConfValue,
    LineValue,
    MountSpec,
    ScriptPath,
    TopologySpec,
)
from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import Model

# a jail user's name, as the jail's createuser accepts it (and useradd after it)
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


class Partition(Model):
    name: DNSName
    """The partition's name (PartitionName)."""
    nodesets: tuple[DNSName, ...] = Field(min_length=1)
    """The node sets whose nodes make up the partition."""
    default: StrictBool = False
    """Jobs that name no partition go here; at most one partition is the default."""
    max_time: Annotated[str, StringConstraints(strict=True, pattern=r"^(INFINITE|[0-9:-]+)$")] = (
        "INFINITE"
    )
    """The longest time limit a job may have here (MaxTime): INFINITE, or minutes, MM:SS, HH:MM:SS,
    D-HH, D-HH:MM:SS."""
    slurm: dict[ConfKey, LineValue] = Field(default_factory=dict)
    """More of its PartitionName line (PriorityTier, QOS, AllowAccounts, OverSubscribe, ...)"""


class LoginSpec(Model):
    address: Annotated[str, StringConstraints(strict=True), AfterValidator(refs.ip_address)] = (
        "127.0.0.1"
    )
    """The host address the login node's sshd, the REST API, Prometheus and the portal are published
    on (local target)."""
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 2222
    """The login node's SSH port on that address."""


def _scratch(path: str) -> str:
    top = path.strip("/").split("/")[0]
    if not top or top in (*NODE_DIRS, "home", "tmp"):
        raise ValueError(
            f"expected a directory outside /, /home, /tmp and the system directories "
            f"(/{', /'.join(NODE_DIRS)}), got {quote(path)}"
        )
    return path.rstrip("/")


class JailSpec(Model):
    keep: tuple[AbsPath, ...] = ()
    """User state kept by every populate, in addition to /home, /opt/user and the SSH host keys"""
    scratch: tuple[Annotated[AbsPath, AfterValidator(_scratch)], ...] = ()
    """Shared scratch directories made in the jail (mode 1777, like /tmp, but the same on every node
    and kept by every populate)"""

    @field_validator("scratch")
    @classmethod
    def _not_nested(cls, scratch: tuple[str, ...]) -> tuple[str, ...]:
        # root makes each one (mkdir -p, chmod 1777) where users of another may have written
        for inner in scratch:
            for outer in scratch:
                if inner != outer and inner.startswith(f"{outer}/"):
                    raise ValueError(
                        f"expected scratch directories apart from each other, got {quote(inner)} "
                        f"inside {quote(outer)}, where any user may write"
                    )
        return scratch

    @property
    def kept(self) -> tuple[str, ...]:
        """What every populate keeps: ``keep`` and the scratch directories (not in the image, so
        kept whole)."""
        return (*self.keep, *self.scratch)


class GpuSpec(Model):
    driver_root: AbsPath = "/"
    """Where the host's NVIDIA driver is found (its files are mounted read-only into GPU nodes)"""
    min_busbw: Annotated[float, Field(strict=True, gt=0)] = 100.0
    """The GPU health check drains a node whose all_reduce_perf bus bandwidth is below this
    (GB/s)"""


# PrivateData's words (slurm.conf(5))
PrivateWord = Literal[
    "accounts", "cloud", "events", "jobs", "nodes", "partitions", "reservations", "usage", "users"
]


class SlurmSpec(Model):
    """How Slurm runs on the nodes."""

    cgroups: StrictBool = True
    """Jobs are held to what they asked for: proctrack/cgroup and task/cgroup constrain each job and
    step's CPUs, memory and devices in a cgroup of its own under the node container's. false: for
    a host that cannot give node containers a writable cgroup subtree; processes are then tracked
    through /proc and memory is scheduled but not enforced."""
    node_ssh: StrictBool = True
    """Users may ssh into a node where a job of theirs runs (sshd on every compute node, with
    pam_slurm_adopt; every job gets an extern step, PrologFlags=Contain, which makes a launch
    slower: bench/b16_identity.py). false: no sshd on the nodes, no extern steps."""
    private_data: tuple[PrivateWord, ...] = ("accounts", "jobs", "usage", "users")
    """PrivateData (slurm.conf and slurmdbd.conf): what an ordinary user sees only of her own
    (operators, root and SlurmUser see all); [] shows every user every job, account and usage"""
    conf: dict[ConfKey, ConfValue] = Field(default_factory=dict)
    """The site's own slurm.conf settings, merged into the file slurmforge writes; keys slurmforge
    manages are refused unless listed in `override`."""
    cgroup_conf: dict[ConfKey, ConfValue] = Field(default_factory=dict)
    """The site's own cgroup.conf settings, merged like `conf`."""
    slurmdbd_conf: dict[ConfKey, ConfValue] = Field(default_factory=dict)
    """The site's own slurmdbd.conf settings, merged like `conf`."""
    override: tuple[ConfKey, ...] = ()
    """Keys slurmforge manages that the site's `conf`, `cgroup_conf` or `slurmdbd_conf` may set
    anyway."""
    prolog: tuple[ScriptPath, ...] = ()
    """Scripts (paths relative to the cluster file) every node runs as root before (prolog) or after
    (epilog) each job, in this order; a failing prolog drains the node"""
    epilog: tuple[ScriptPath, ...] = ()
    """Scripts (paths relative to the cluster file) every node runs as root after each job, in this
    order."""


class ControllerSpec(Model):
    """slurmctld: one, which Docker or Kubernetes restarts when it dies, or a primary and a
    backup sharing its StateSaveLocation (the backup takes control when the primary stops
    answering, and hands it back when the primary returns)."""

    replicas: Annotated[StrictInt, Field(ge=1, le=2)] = 1
    """1: one slurmctld, restarted when it dies; 2: a primary and a backup controller."""
    failover_after: Annotated[StrictInt, Field(ge=5, le=3600)] = 10
    """Seconds the backup waits for an answer from the primary before it takes control
    (SlurmctldTimeout; Slurm's own default is 120)"""


class ImagesSpec(Model):
    set: Annotated[str, StringConstraints(strict=True)] = "default"
    """The matrix set of versions.yaml whose images the cluster runs (built by `invoke build
    --set`)."""
    cell: Annotated[str, StringConstraints(strict=True)] | None = None
    """The cell of that set (distro, Slurm, CUDA); needed when the set has several."""


class ClusterSpec(Model):
    name: DNSName
    """The cluster's name (ClusterName; the Compose project and the Kubernetes namespace's
    default)."""
    images: ImagesSpec = ImagesSpec()
    """Which built images the cluster runs."""
    login: LoginSpec = LoginSpec()
    """The login node."""
    controller: ControllerSpec = ControllerSpec()
    """slurmctld: one, or a primary and a backup."""
    jail: JailSpec = JailSpec()
    """The shared root every login session and job step runs in."""
    gpu: GpuSpec = GpuSpec()
    """GPU nodes: where the host's driver is, and the GPU health check."""
    accounting: AccountingSpec = AccountingSpec()
    """Job accounting: slurmdbd on a database."""
    rest: RestSpec = RestSpec()
    """Slurm's REST API (slurmrestd)."""
    metrics: MetricsSpec = MetricsSpec()
    """The exporter, the alert rules and the local Prometheus."""
    portal: PortalSpec = PortalSpec()
    """The web portal: JupyterHub, starting JupyterLab as a Slurm job (spec/portal.py)"""
    kubernetes: KubernetesSpec = KubernetesSpec()
    """How the `k8s` target renders this cluster (ignored by `local`)."""
    slurm: SlurmSpec = SlurmSpec()
    """How Slurm runs on the nodes, and the site's own Slurm settings."""
    health: HealthSpec = HealthSpec()
    """The node health check, which drains a node that fails it and resumes it once it passes."""
    disruption: DisruptionSpec = DisruptionSpec()
    """How a deploy replaces nodes whose definition changed: drained, their jobs waited for, the
    rest requeued."""
    identity: IdentitySpec = IdentitySpec()
    """Where users come from: the jail's own files (createuser) or a directory (spec/identity.py)"""
    layers: Annotated[str, StringConstraints(strict=True)] = "layers"
    """The directory (relative to the cluster file) that node sets' `definitions` are looked up
    in."""
    mounts: tuple[MountSpec, ...] = ()
    """Site storage mounted into the jail on the login node and every node."""
    topology: TopologySpec | None = None
    """The fabric, written as topology.conf."""
    nodesets: tuple[NodeSet, ...] = Field(min_length=1)
    """Groups of identical nodes."""
    partitions: tuple[Partition, ...] = Field(min_length=1)
    """Slurm's partitions, each made of node sets."""

    @property
    def kept(self) -> tuple[str, ...]:
        """What every populate keeps: the jail's kept paths and the mount points of site
        storage (a populate must not remove a directory that a running node mounts over)."""
        return (*self.jail.kept, *(m.path for m in self.mounts))

    @property
    def skipped(self) -> tuple[str, ...]:
        """What every populate leaves out of the jail: what only a feature this cluster does not
        enable uses."""
        return self.portal.jail_skip


@dataclass(frozen=True)
class Cluster:
    """A validated cluster bound to one build cell: image references, paths, Slurm version."""

    spec: ClusterSpec
    path: Path
    cell: matrix.Cell
    # component → image reference; a node set of another arch than the cell's has its image
    # and that arch's jail (its /usr) under image_key(component, arch)
    images: dict[str, str]
    build_hint: str  # the `invoke build` that produces these images

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nodes(self) -> list[tuple[NodeSet, str]]:
        return [(ns, node) for ns in self.spec.nodesets for node in ns.nodes]

    @property
    def fixed_nodes(self) -> list[tuple[NodeSet, str]]:
        """The nodes that run from the deploy on (an elastic set's are started by Slurm)."""
        return [(ns, node) for ns in self.spec.nodesets for node in ns.fixed_nodes]

    @property
    def elastic(self) -> bool:
        return any(ns.elastic for ns in self.spec.nodesets)

    def nodeset(self, name: str) -> NodeSet:
        return next(ns for ns in self.spec.nodesets if ns.name == name)

    def arch(self, ns: NodeSet) -> str:
        return ns.arch or self.cell.arch

    @property
    def other_arches(self) -> list[str]:
        """The arches of node sets that are not the cell's: each has a jail /usr of its own."""
        return sorted({self.arch(ns) for ns in self.spec.nodesets} - {self.cell.arch})

    def image_key(self, component: str, arch: str | None = None) -> str:
        """Where ``images`` holds ``component``'s image for ``arch`` (default: the cell's)."""
        return image_key(component, arch, self.cell.arch)

    def image(self, component: str, arch: str | None = None) -> str:
        """``component``'s image for ``arch`` (default: the cell's)."""
        return self.images[self.image_key(component, arch)]

    def node_image(self, ns: NodeSet) -> str:
        return self.image(ns.image, self.arch(ns))


def image_key(component: str, arch: str | None, cell_arch: str) -> str:
    """Where a cluster's ``images`` holds ``component``'s image for ``arch``: the cell's own arch
    under the component's name, another arch's under ``component@arch``."""
    return component if arch in (None, cell_arch) else f"{component}@{arch}"


def check_user(name: str) -> str:
    """A jail user name (``--user``), as the jail's createuser accepts it."""
    if not USER_NAME.fullmatch(name):
        raise ConfigError(
            f"--user {quote(name)}: expected a user name: a-z or _, then up to 31 of a-z 0-9 _ -"
        )
    return name


def as_dict(cluster: Cluster) -> dict[str, Any]:
    """The resolved model as plain data (written next to the manifests for review)."""
    return {
        "cluster": cluster.spec.model_dump(),
        "cell": cluster.cell.name,
        "images": cluster.images,
    }
