"""The records a role is made of, knowing no feature: a secret, a configuration directory, data
kept across restarts, a port, a readiness probe, resources, and the role itself; the cluster's
networks and the capabilities Slurm's daemons need. The targets translate these records.
"""

from __future__ import annotations

import secrets as random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from slurmforge.deploy import portal_tls
from slurmforge.deploy.target import TARGETS

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


# Networks: the cluster's, which users' sessions and jobs share with Slurm's daemons (Compose's
# default network); the accounting database's, which only slurmdbd shares with it; and the
# management network, where Prometheus alone of the cluster's roles is, with the exporter and the
# portal's hub it scrapes. Only INTERNAL ones are cut off from the host's other networks
# (Prometheus publishes its port from the management network).
CLUSTER_NET, DATABASE_NET, MANAGEMENT_NET = "default", "database", "management"

INTERNAL_NETS = frozenset({DATABASE_NET})


@dataclass(frozen=True)
class Secret:
    """A secret file the images read. Locally it is bound read-only at /run/secrets/<file> (the
    images' default); on Kubernetes it is a Secret of one key mounted read-only in a directory of
    its own (/run/secrets would collide with the service-account token below /var/run/secrets),
    and ``env`` tells the image where."""

    file: str
    secret: str  # the Kubernetes Secret's name
    env: str
    dir: str
    size: int  # random bytes when made
    text: bool  # kept as text (a password: URL-safe base64, no quoting needed in SQL or config)
    when: Callable[[ClusterSpec], bool] = lambda spec: True  # whether the cluster has it
    # locally, a group that may read it besides root (mode 0440): the containers that mount it
    # run with it as a supplementary group, for a daemon that runs as its own account from the
    # start and reads the file while it runs (Prometheus); None: root's alone (0400)
    group: int | None = None

    @property
    def path(self) -> str:
        """Where a Kubernetes pod finds it."""
        return f"{self.dir}/{self.file}"

    def new(self) -> bytes:
        """Fresh content."""
        return (
            random.token_urlsafe(self.size).encode() if self.text else random.token_bytes(self.size)
        )


@dataclass(frozen=True)
class CertificateSecret(Secret):
    """A TLS certificate and its key in one PEM file, made self-signed (portal_tls.py)."""

    def new(self) -> bytes:
        return portal_tls.make()


LOCAL_SECRETS_DIR = "/run/secrets"


@dataclass(frozen=True)
class ConfigDir:
    """A directory of generated configuration files, mounted read-only: written beside the
    Compose file (``local``) or held in a ConfigMap (``name``)."""

    name: str
    local: str  # relative to the Compose file
    path: str  # where the containers see it
    env: tuple[str, str] | None = None  # (variable, file) for an image that is told where
    when: Callable[[ClusterSpec], bool] = lambda spec: True  # whether the cluster has it


@dataclass(frozen=True)
class Data:
    """State a role keeps across restarts: a named volume locally, a ReadWriteOnce claim of its
    StatefulSet on Kubernetes, sized by ``kubernetes.<setting>``."""

    path: str
    local: str  # the Compose volume (renaming it would lose a running cluster's data)
    claim: str  # the volumeClaimTemplate (pod <role>-0's claim is <claim>-<role>-0)
    setting: Literal["state", "database"]
    owner: str | None = None  # handed to this user:group before the role starts (k8s; Docker
    # volumes copy the image's owner, a new claim's root is root's)


@dataclass(frozen=True)
class Port:
    name: str
    number: int
    # the cluster file's setting of the port it is published on (on the login address locally;
    # a Service of kubernetes.login_service's type on k8s); None: reached inside the cluster
    publish: Literal["login.port", "rest.port", "metrics.prometheus.port", "portal.port"] | None = (
        None
    )
    service_port: int | None = None  # a Kubernetes Service's port, when not the published one


@dataclass(frozen=True)
class Probe:
    """Ready while: the daemon of ``pid_file`` runs, something listens on ``listening``, or
    ``command`` succeeds. Kubernetes runs it as the readiness probe (``listening`` as its own
    connection where ``connect``: for daemons that take an empty connection without logging
    it); a local deploy runs it in the containers of the roles that Slurm's own view of its
    nodes does not cover (the portal, REST, ...), ``listening`` read from the kernel's socket
    table."""

    pid_file: str | None = None
    listening: int | None = None
    connect: bool = True
    command: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        if self.pid_file:
            return ["sh", "-c", f"kill -0 $(cat {self.pid_file})"]
        if self.listening:
            pattern = f":{self.listening:04X} 0+:0000 0A "
            return ["grep", "-qE", pattern, "/proc/net/tcp", "/proc/net/tcp6"]
        return list(self.command)


@dataclass(frozen=True)
class Resources:
    """What a role's pod requests and its limits: (cpu, memory) each, as Kubernetes writes them."""

    requests: tuple[str, str]
    limits: tuple[str, str]


# What the roles' processes do that needs a capability. Targets that drop every capability add
# back exactly these (k8s); Docker's default set already holds most, so locally only the rest is
# added. The entrypoint installs the munge key for the munge user (CHOWN, FOWNER, DAC_OVERRIDE)
# and starts munged as that user (SETUID, SETGID); Slurm daemons start processes as users and
# signal them (SETUID, SETGID, KILL); the jail plugin and sshd chroot (SYS_CHROOT).
DAEMON = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")

DOCKER_DEFAULT_CAPABILITIES = frozenset(
    {
        *("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD"),
        *("NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"),
    }
)

Workload = Literal["daemon", "nodes", "job", "schedule"]


def _always(spec: ClusterSpec) -> bool:
    return True


def _no_env(spec: ClusterSpec) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Role:
    name: str
    image: str | None  # its component in versions.yaml; None: each node set's own
    workload: Workload = "daemon"  # daemon: one; nodes: one per Slurm node; job: runs to
    # completion when deploy asks (populate); schedule: on a schedule (k8s CronJob)
    command: tuple[str, ...] = ()  # () runs the image's own; "{node}" is the Slurm node's name
    container: str = ""  # the container's name in a pod, when not the role's
    ports: tuple[Port, ...] = ()
    probe: Probe | None = None
    secrets: tuple[Secret, ...] = ()  # each mounted when the cluster has it
    configs: tuple[ConfigDir, ...] = ()
    jail: Literal["rw", "ro"] | None = None  # how it mounts the jail
    data: Data | None = None
    capabilities: tuple[str, ...] = ()  # all that its processes need (a node set adds its own)
    runs_users: bool = False  # users' sessions or jobs, whose setuid programs need escalation
    runs_containers: bool = False  # jobs start containers (enroot's pivot_root in a user
    # namespace, which the runtimes' default seccomp profiles refuse): no seccomp filter
    fixed_hostname: bool = False  # its host name must be its name (slurmdbd checks DbdHost)
    stable_name: bool = False  # reached or operated by a stable name (k8s: pod <name>-0), as a
    # role that keeps data is
    after: tuple[str, ...] = ()  # roles that should start before it: the local target starts
    # the controller's first, and an upgrade's slurmdbd's (deploy/local/render.started_before);
    # Kubernetes starts every pod at once
    resources: Resources = Resources(("100m", "128Mi"), ("1", "512Mi"))
    grace_seconds: int | None = None  # to stop cleanly, when more than the runtime's default
    # holds no capability but its own (Docker's default set dropped) and gains none (setuid
    # programs, file capabilities: no-new-privileges)
    least_privilege: bool = False
    scraped: Port | None = None  # the port Prometheus scrapes, at metrics_path
    metrics_path: str = "/metrics"
    # who may reach it: the roles that share one of these networks (CLUSTER_NET: every role
    # there, users' sessions and jobs included); Compose networks, a NetworkPolicy on k8s for a
    # role off CLUSTER_NET
    networks: tuple[str, ...] = (CLUSTER_NET,)
    targets: tuple[str, ...] = tuple(TARGETS)
    when: Callable[[ClusterSpec], bool] = _always  # whether a cluster runs it
    env: Callable[[ClusterSpec], dict[str, str]] = field(default=_no_env)

    @property
    def container_name(self) -> str:
        return self.container or self.name

    def mounted_secrets(self, spec: ClusterSpec) -> tuple[Secret, ...]:
        return tuple(s for s in self.secrets if s.when(spec))

    def mounted_configs(self, spec: ClusterSpec) -> tuple[ConfigDir, ...]:
        return tuple(c for c in self.configs if c.when(spec))

    def added_capabilities(self, extra: tuple[str, ...] = ()) -> list[str]:
        """What to add to Docker's default set (its targets drop nothing)."""
        return sorted({*self.capabilities, *extra} - DOCKER_DEFAULT_CAPABILITIES)
