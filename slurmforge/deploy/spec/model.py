"""The typed deployment model: one cluster, its node sets, partitions, images, volumes, secrets.

Loaded from a cluster file (deploy/cluster.yaml by default) whose node sets may use layered
``definitions`` (see layers.py). The same model feeds the Slurm configuration and every target's
renderer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from slurmforge import matrix, refs
from slurmforge.deploy.spec.fields import (
    NODE_DIRS,
    AbsPath,
    AccountName,
    DNSName,
)
from slurmforge.deploy.spec.identity import GroupName, IdentitySpec
from slurmforge.deploy.spec.kubernetes import KubernetesSpec
from slurmforge.deploy.spec.nodeset import NodeSet
from slurmforge.deploy.spec.portal import PortalSpec
from slurmforge.deploy.spec.site import (
    AccountSpec,
    ConfKey,
    ConfValue,
    LineValue,
    MountSpec,
    QosSpec,
    ScriptPath,
    TopologySpec,
)
from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import Model

# a jail user's name, as the jail's createuser accepts it (and useradd after it)
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


class Partition(Model):
    name: DNSName
    nodesets: tuple[DNSName, ...] = Field(min_length=1)
    default: StrictBool = False
    max_time: Annotated[str, StringConstraints(strict=True, pattern=r"^(INFINITE|[0-9:-]+)$")] = (
        "INFINITE"
    )
    # more of its PartitionName line (PriorityTier, QOS, AllowAccounts, OverSubscribe, ...)
    slurm: dict[ConfKey, LineValue] = Field(default_factory=dict)


class LoginSpec(Model):
    address: Annotated[str, StringConstraints(strict=True), AfterValidator(refs.ip_address)] = (
        "127.0.0.1"
    )
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 2222


def _scratch(path: str) -> str:
    top = path.strip("/").split("/")[0]
    if not top or top in (*NODE_DIRS, "home", "tmp"):
        raise ValueError(
            f"expected a directory outside /, /home, /tmp and the system directories "
            f"(/{', /'.join(NODE_DIRS)}), got {quote(path)}"
        )
    return path.rstrip("/")


class JailSpec(Model):
    # user state kept by every populate, in addition to /home, /opt/user and the SSH host keys
    keep: tuple[AbsPath, ...] = ()
    # shared scratch directories made in the jail (mode 1777, like /tmp, but the same on every
    # node and kept by every populate)
    scratch: tuple[Annotated[AbsPath, AfterValidator(_scratch)], ...] = ()

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
    # where the host's NVIDIA driver is found (its files are mounted read-only into GPU nodes)
    driver_root: AbsPath = "/"
    # the GPU health check drains a node whose all_reduce_perf bus bandwidth is below this (GB/s)
    min_busbw: Annotated[float, Field(strict=True, gt=0)] = 100.0


Port = Annotated[StrictInt, Field(ge=1, le=65535)]


class DatabaseSpec(Model):
    """A MySQL/MariaDB the site already runs, instead of the cluster's own MariaDB."""

    host: Annotated[str, StringConstraints(strict=True), AfterValidator(refs.host)]
    port: Port = 3306
    user: Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.-]{1,80}$")] = (
        "slurm"
    )
    # a file on the deploying machine that holds the password (never copied anywhere else in
    # clear: the local target mounts it, the k8s target makes a Secret of it)
    password_secret: AbsPath
    name: Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_]{1,64}$")] = (
        "slurm_acct_db"
    )


# AccountingStorageEnforce's keywords (slurm.conf(5))
Enforce = Literal["associations", "limits", "nojobs", "nosteps", "qos", "safe", "wckeys"]


# Tokens (`scontrol token`, slurmrestd) no ordinary user may have for longer: max_token_lifespan
# of AuthAltParameters (slurm.conf(5), Slurm 23.11 to 26.05). A duration as ISO 8601 writes it
# (PT1H, P1D) or a number of seconds, parsed by pydantic.
def _seconds(value: object) -> object:
    """A duration's whole seconds (kept as a number: the model is dumped as JSON)."""
    if isinstance(value, bool):
        return value  # refused below, not taken for 1 second
    try:
        return int(_DURATION.validate_python(value).total_seconds())
    except ValidationError:
        raise ValueError(
            f"expected a duration as ISO 8601 writes it (PT30M, PT1H, P1D) or a number of "
            f"seconds, got {quote(value)}"
        ) from None


_DURATION = TypeAdapter(timedelta)
TokenLifespan = Annotated[StrictInt, BeforeValidator(_seconds), Field(ge=60, le=366 * 86400)]


class AccountingSpec(Model):
    """Job accounting: slurmdbd on a database, sacct/sacctmgr, fair-share."""

    enabled: StrictBool = True
    # AccountingStorageEnforce: a job runs only under an association its user has, within its
    # limits and QoS, and is refused at submission when it could never run (safe);
    # [] lets users without an association submit, charged to nobody's limits
    enforce: tuple[Enforce, ...] = ("associations", "limits", "qos", "safe")
    # the longest an ordinary user's token may live (root and SlurmUser are not limited)
    max_token_lifespan: TokenLifespan = 3600  # seconds
    # the account createuser puts a new user under (unless given --account)
    default_account: AccountName = "default"
    database: DatabaseSpec | None = None  # None: the cluster's own MariaDB
    # declared QoS and accounts, made or updated with sacctmgr on every deploy; ones the
    # database has beyond these are reported, never deleted
    qos: tuple[QosSpec, ...] = ()
    accounts: tuple[AccountSpec, ...] = ()
    # account → directory group (identity.source: ldap): every deploy makes the account's users
    # the group's members, adding and deleting their associations (job records stay)
    accounts_from_groups: dict[AccountName, GroupName] = Field(default_factory=dict)


class RestSpec(Model):
    """slurmrestd, published on the login address (needs accounting for its JWT keys)."""

    enabled: StrictBool = True
    port: Port = 6820


class PrometheusSpec(Model):
    """The local target's own Prometheus, scraping the exporter (Kubernetes: the site's)."""

    enabled: StrictBool = True
    port: Port = 9090  # published on the login address
    scrape_interval: Annotated[StrictInt, Field(ge=1, le=3600)] = 15  # seconds


class MetricsSpec(Model):
    """The exporter (both targets), the alert rules' thresholds and the local Prometheus."""

    enabled: StrictBool = True
    # per-job usage (CPU time, largest RSS) of the jobs accounting saw end this long ago or later
    usage_window: Annotated[StrictInt, Field(ge=60, le=86400)] = 3600  # seconds
    # SlurmJobPendingTooLong fires for a partition whose oldest pending job waited this long
    pending_alert_after: Annotated[StrictInt, Field(ge=60)] = 3600  # seconds
    prometheus: PrometheusSpec = PrometheusSpec()


# PrivateData's words (slurm.conf(5))
PrivateWord = Literal[
    "accounts", "cloud", "events", "jobs", "nodes", "partitions", "reservations", "usage", "users"
]


class SlurmSpec(Model):
    """How Slurm runs on the nodes."""

    # Jobs are held to what they asked for: proctrack/cgroup and task/cgroup constrain each job
    # and step's CPUs, memory and devices in a cgroup of its own under the node container's.
    # false: for a host that cannot give node containers a writable cgroup subtree; processes
    # are then tracked through /proc and memory is scheduled but not enforced.
    cgroups: StrictBool = True
    # Users may ssh into a node where a job of theirs runs (sshd on every compute node, with
    # pam_slurm_adopt; every job gets an extern step, PrologFlags=Contain, which makes a
    # launch slower: bench/b16_identity.py). false: no sshd on the nodes, no extern steps.
    node_ssh: StrictBool = True
    # PrivateData (slurm.conf and slurmdbd.conf): what an ordinary user sees only of her own
    # (operators, root and SlurmUser see all); [] shows every user every job, account and usage
    private_data: tuple[PrivateWord, ...] = ("accounts", "jobs", "usage", "users")
    # the site's own settings, merged into the files slurmforge writes; keys slurmforge
    # manages are refused unless listed in `override` (slurm/siteconf.py, README)
    conf: dict[ConfKey, ConfValue] = Field(default_factory=dict)  # slurm.conf
    cgroup_conf: dict[ConfKey, ConfValue] = Field(default_factory=dict)
    slurmdbd_conf: dict[ConfKey, ConfValue] = Field(default_factory=dict)
    override: tuple[ConfKey, ...] = ()
    # scripts (paths relative to the cluster file) every node runs as root before (prolog) or
    # after (epilog) each job, in this order; a failing prolog drains the node
    prolog: tuple[ScriptPath, ...] = ()
    epilog: tuple[ScriptPath, ...] = ()


class ControllerSpec(Model):
    """slurmctld: one, which Docker or Kubernetes restarts when it dies, or a primary and a
    backup sharing its StateSaveLocation (the backup takes control when the primary stops
    answering, and hands it back when the primary returns)."""

    replicas: Annotated[StrictInt, Field(ge=1, le=2)] = 1
    # seconds the backup waits for an answer from the primary before it takes control
    # (SlurmctldTimeout; Slurm's own default is 120)
    failover_after: Annotated[StrictInt, Field(ge=5, le=3600)] = 10


class ImagesSpec(Model):
    set: Annotated[str, StringConstraints(strict=True)] = "default"
    cell: Annotated[str, StringConstraints(strict=True)] | None = None


class ClusterSpec(Model):
    name: DNSName
    images: ImagesSpec = ImagesSpec()
    login: LoginSpec = LoginSpec()
    controller: ControllerSpec = ControllerSpec()
    jail: JailSpec = JailSpec()
    gpu: GpuSpec = GpuSpec()
    accounting: AccountingSpec = AccountingSpec()
    rest: RestSpec = RestSpec()
    metrics: MetricsSpec = MetricsSpec()
    # the web portal: JupyterHub, starting JupyterLab as a Slurm job (spec/portal.py)
    portal: PortalSpec = PortalSpec()
    kubernetes: KubernetesSpec = KubernetesSpec()
    slurm: SlurmSpec = SlurmSpec()
    # where users come from: the jail's own files (createuser) or a directory (spec/identity.py)
    identity: IdentitySpec = IdentitySpec()
    layers: Annotated[str, StringConstraints(strict=True)] = "layers"
    mounts: tuple[MountSpec, ...] = ()
    topology: TopologySpec | None = None
    nodesets: tuple[NodeSet, ...] = Field(min_length=1)
    partitions: tuple[Partition, ...] = Field(min_length=1)

    @property
    def kept(self) -> tuple[str, ...]:
        """What every populate keeps: the jail's kept paths and the mount points of site
        storage (a populate must not remove a directory that a running node mounts over)."""
        return (*self.jail.kept, *(m.path for m in self.mounts))


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
