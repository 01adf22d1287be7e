"""The roles a cluster runs, declared once for every deploy target.

A role is one kind of container in a cluster: the controller, a compute node, the login node,
slurmdbd and its database, the REST API, the jail populate, the GPU health check. Its record says
what it is (image, command, ports, readiness), what it is given (secrets, configuration
directories, the jail, its own data, capabilities, resources) and when a cluster runs it. The
renderers (local/render.py, k8s/render.py) and runners (local/run.py, k8s/run.py) translate the
records into their target's objects; nothing there restates them.

- Where to add a role: a `Role` in ROLES, and its image under images/. Both targets then render
  it (a Compose service; a StatefulSet or Deployment with its Services on Kubernetes), mount what
  it names, and wait for its readiness probe.
- Where to add a secret: a `Secret` in SECRETS, named in each role that mounts it. It is made at
  the first deploy (local: a file in the cluster's state directory; k8s: a Secret) and never
  written into a generated file.
- Where a role needs more than the generic translation (a compute node's per-node services and
  GPUs, slurmdbd's wait for its database), that target's renderer has a hook named after it.
"""

from __future__ import annotations

import secrets as random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from slurmforge import jail_contract
from slurmforge.deploy import portal_tls
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.target import TARGETS

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec

# Role names: also their Compose services and their objects' names on Kubernetes and, where a
# role has an image of its own, its component in versions.yaml. JAIL is a component only: the
# image that jail-populate copies into the shared root.
CONTROLLER, LOGIN, JAIL = "slurmctld", "login", "jail"
CONTROLLER_BACKUP = "slurmctld-backup"  # the backup slurmctld's service (controller.replicas: 2)
# Networks: the cluster's, which users' sessions and jobs share with Slurm's daemons (Compose's
# default network); the accounting database's, which only slurmdbd shares with it; and the
# management network, where Prometheus alone of the cluster's roles is, with the exporter and the
# portal's hub it scrapes. Only INTERNAL ones are cut off from the host's other networks
# (Prometheus publishes its port from the management network).
CLUSTER_NET, DATABASE_NET, MANAGEMENT_NET = "default", "database", "management"
INTERNAL_NETS = frozenset({DATABASE_NET})
DBD, RESTD, DATABASE = "slurmdbd", "slurmrestd", "mariadb"
DIRECTORY = "slapd"
NODE, POPULATE, HEALTH_CHECK = "node", "jail-populate", "gpu-health-check"
BACKUP = "backup"
EXPORTER, PROMETHEUS = "exporter", "prometheus"
# starts and stops elastic node sets' nodes when slurmctld asks (local: a container beside the
# cluster's; k8s: a second container of slurmctld's pod, deploy/k8s/power.py)
NODE_POWER = "node-power"
PORTAL = "portal"  # the web portal's hub (JupyterHub)
POWER_SPOOL = "/run/slurmforge/power"  # where slurmctld's programs leave it their requests
POWER_VOLUME = "power"


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


def _accounting(spec: ClusterSpec) -> bool:
    return spec.accounting.enabled


def _ldap(spec: ClusterSpec) -> bool:
    return sssd.ldap_of(spec) is not None


def _scheduled(spec: ClusterSpec) -> bool:
    return spec.kubernetes.backup.schedule is not None


def _ldap_bind(spec: ClusterSpec) -> bool:
    ldap = sssd.ldap_of(spec)
    return ldap is not None and ldap.reader is not None


MUNGE = Secret("munge.key", "munge-key", "MUNGE_KEY_FILE", "/etc/slurmforge/munge", 1024, False)
# signs and checks tokens (slurmctld, slurmdbd; scontrol token)
JWT = Secret(
    "jwt_hs256.key", "jwt-key", "JWT_KEY_FILE", "/etc/slurmforge/jwt", 64, False, _accounting
)
# an external database's comes from its file (accounting.database.password_secret)
DB_PASSWORD = Secret(
    "db-password", "db-password", "DB_PASSWORD_FILE", "/etc/slurmforge/db", 32, True, _accounting
)
# the password SSSD binds to the directory with: a site's comes from its file
# (identity.ldap.bind_password_file), the embedded directory's reader's is made once
LDAP_BIND = Secret(
    "ldap-bind-password",
    "ldap-bind-password",
    "LDAP_BIND_PASSWORD_FILE",
    "/etc/slurmforge/ldap",
    32,
    True,
    _ldap_bind,
)


def _portal(spec: ClusterSpec) -> bool:
    return spec.portal.enabled


# the hub's cookie secret (signs its users' sessions) and the token it and its proxy share
PORTAL_COOKIE = Secret(
    "portal-cookie-secret",
    "portal-cookie-secret",
    "PORTAL_COOKIE_SECRET_FILE",
    "/etc/slurmforge/portal-cookie",
    32,
    False,
    _portal,
)
PORTAL_PROXY = Secret(
    "portal-proxy-token",
    "portal-proxy-token",
    "PORTAL_PROXY_TOKEN_FILE",
    "/etc/slurmforge/portal-proxy",
    32,
    True,
    _portal,
)
# what the portal serves TLS with on its published port: a site's (portal.tls_pem) or one made
PORTAL_TLS = CertificateSecret(
    "portal-tls.pem",
    "portal-tls",
    "PORTAL_TLS_FILE",
    "/etc/slurmforge/portal-tls",
    0,
    False,
    _portal,
)


def _scraped(spec: ClusterSpec) -> bool:
    return spec.metrics.enabled or spec.portal.enabled


# what a scrape of the exporter, a GPU node's collector or the hub's /hub/metrics must present
# (a bearer token): their series name users and their jobs, which PrivateData keeps from other
# users. Locally Prometheus reads it as its group (a number of no account's in any image).
METRICS_TOKEN = Secret(
    "metrics-token",
    "metrics-token",
    "METRICS_TOKEN_FILE",
    "/etc/slurmforge/metrics",
    32,
    True,
    _scraped,
    group=9341,
)
SECRETS = {
    s.file: s
    for s in (
        *(MUNGE, JWT, DB_PASSWORD, LDAP_BIND),
        *(PORTAL_COOKIE, PORTAL_PROXY, PORTAL_TLS, METRICS_TOKEN),
    )
}
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


SLURM_CONF = ConfigDir("slurm-config", "etc/slurm", "/etc/slurm")
# the jail's client subset (slurm.conf, plugstack.conf, ...), bound onto the jail's /etc/slurm
JAIL_CONF = ConfigDir("slurm-jail-config", "jail/etc/slurm", jail_contract.CONF)
# slurmdbd.conf without its password (the image adds StoragePass from DB_PASSWORD at start)
DBD_CONF = ConfigDir(
    "slurmdbd-config",
    "etc/slurmdbd",
    "/etc/slurmforge/slurmdbd",
    ("SLURMDBD_CONF_IN", "slurmdbd.conf"),
)
# the local Prometheus' prometheus.yml and alert rules (deploy/monitoring.py)
PROMETHEUS_CONF = ConfigDir("prometheus-config", "etc/prometheus", "/etc/slurmforge/prometheus")
# SSSD's configuration (without its password), the directory's CA and the jail's sudo rule
# (identity/sssd.py); the embedded directory's seed
IDENTITY_CONF = ConfigDir("identity-config", "etc/identity", "/etc/slurmforge/identity", when=_ldap)
DIRECTORY_CONF = ConfigDir(
    "directory-config", "etc/slapd", "/etc/slurmforge/slapd", when=sssd.embedded
)
# what the scheduled backup copies (snapshot.Plan, as plan.json)
BACKUP_CONF = ConfigDir("backup-config", "etc/backup", "/etc/slurmforge/backup", when=_scheduled)
# the hub's settings, portal.yaml (deploy/portal.py)
PORTAL_CONF = ConfigDir("portal-config", "etc/portal", "/etc/slurmforge/portal", when=_portal)
CONFIGS = (
    SLURM_CONF, JAIL_CONF, DBD_CONF, PROMETHEUS_CONF, IDENTITY_CONF, DIRECTORY_CONF, BACKUP_CONF,
    PORTAL_CONF,
)  # fmt: skip


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


# slurmctld's StateSaveLocation; the cluster's own accounting database
CONTROLLER_STATE = Data("/var/spool/slurmctld", "state", "state", "state", owner="slurm:slurm")
DATABASE_DATA = Data("/var/lib/mysql", "accounting", "data", "database")
DIRECTORY_DATA = Data("/var/lib/ldap", "directory", "directory", "state")
PROMETHEUS_DATA = Data("/var/lib/prometheus/metrics2", "metrics", "metrics", "state")
# the hub's database: who is logged in, and which job runs each user's server
PORTAL_DATA = Data("/var/lib/jupyterhub", "portal", "portal", "state")
PORTAL_DB = "jupyterhub.sqlite"  # in PORTAL_DATA (the db_url of images/portal/slurmforge_portal.py)


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
    """Ready while: the daemon of ``pid_file`` runs, something listens on ``listening`` (read
    from the kernel's socket table: no connection, which daemons would log), or ``command``
    succeeds. Kubernetes runs it as the readiness probe; a local deploy runs it in the containers
    of the roles that Slurm's own view of its nodes does not cover (the portal, REST, ...)."""

    pid_file: str | None = None
    listening: int | None = None
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
    after: tuple[str, ...] = ()  # roles started before it, where a target orders starts
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


def _node_env(spec: ClusterSpec) -> dict[str, str]:
    # images/slurmd/sshd.sh: sshd for users with a job on the node (slurm.node_ssh)
    return {} if spec.slurm.node_ssh else {"SLURMFORGE_NODE_SSHD": "0"}


def _login_env(spec: ClusterSpec) -> dict[str, str]:
    scratch = spec.jail.scratch
    return {jail_contract.SCRATCH_ENV: " ".join(scratch)} if scratch else {}


# the cluster's own database and slurmdbd's user there (images/mariadb/mariadb-init's defaults)
OWN_DB_NAME, OWN_DB_USER = "slurm_acct_db", "slurm"


def own_database(spec: ClusterSpec) -> bool:
    return spec.accounting.enabled and spec.accounting.database is None


def _metrics(spec: ClusterSpec) -> bool:
    return spec.metrics.enabled


def _prometheus(spec: ClusterSpec) -> bool:
    return spec.metrics.enabled and spec.metrics.prometheus.enabled


def _exporter_env(spec: ClusterSpec) -> dict[str, str]:
    return {
        "SLURM_EXPORTER_ACCOUNTING": "1" if spec.accounting.enabled else "0",
        "SLURM_EXPORTER_USAGE_WINDOW": str(spec.metrics.usage_window),
        # within Prometheus' scrape timeout (at most the interval, 10 s by default)
        "SLURM_EXPORTER_TIMEOUT": str(min(8.0, spec.metrics.prometheus.scrape_interval * 0.7)),
    }


def _directory_env(spec: ClusterSpec) -> dict[str, str]:
    ldap = sssd.ldap_of(spec)
    return {"SLAPD_BASE_DN": ldap.base_dn} if ldap else {}


def _portal_env(spec: ClusterSpec) -> dict[str, str]:
    # no session runs inside its jail: SSSD's sockets stay its own (images/runtime/identity.sh)
    return {"SLURMFORGE_JAIL_SESSIONS": "0"}


EXPORTER_PORT = Port("metrics", 9341)
# the exporter's account (images/runtime): with accounting, a Slurm operator, so that it sees
# every user's jobs where PrivateData hides them from ordinary users (slurm/database.py)
EXPORTER_USER = "slurm-exporter"
# where notebook servers (jobs on the compute nodes) reach the hub's API
PORTAL_API = Port("hub-api", 8081)
GPU_METRICS_PORT = 9342  # `slurm_exporter.py gpu` beside each GPU node (local target)


def elastic(spec: ClusterSpec) -> bool:
    return any(ns.elastic for ns in spec.nodesets)


def _power_env(spec: ClusterSpec) -> dict[str, str]:
    nodes = [node for ns in spec.nodesets for node in ns.elastic_nodes]
    return {"NODE_POWER_PROJECT": spec.name, "NODE_POWER_NODES": ",".join(nodes)}


def _health_check(spec: ClusterSpec) -> bool:
    return spec.kubernetes.health_check.enabled and any(ns.gpus for ns in spec.nodesets)


ROLES: tuple[Role, ...] = (
    Role(
        CONTROLLER,
        image=CONTROLLER,
        command=("slurmforge-slurmctld",),  # slurmctld -D (images/slurmctld/slurmctld-run)
        ports=(Port("slurmctld", 6817),),
        probe=Probe(pid_file="/var/run/slurmctld.pid"),
        secrets=(MUNGE, JWT, LDAP_BIND),
        configs=(SLURM_CONF, IDENTITY_CONF),
        # read-only: users and groups come from the jail's /etc (libnss-extrausers)
        jail="ro",
        data=CONTROLLER_STATE,
        capabilities=DAEMON,
        # nodes first: slurmctld resolves every node name when it starts (slurmd retries until
        # the controller answers)
        stable_name=True,  # the nodes reach slurmctld-0.slurmctld
        after=(NODE, DBD, DIRECTORY, NODE_POWER),
        resources=Resources(("500m", "512Mi"), ("2", "2Gi")),
    ),
    Role(
        NODE,
        image=None,
        workload="nodes",
        command=("slurmd", "-D", "-N", "{node}"),
        container="slurmd",
        ports=(Port("slurmd", 6818),),
        probe=Probe(pid_file="/var/run/slurmd.pid"),
        secrets=(MUNGE, LDAP_BIND),
        configs=(SLURM_CONF, JAIL_CONF, IDENTITY_CONF),
        jail="rw",
        # slurmstepd (root) sets a task's CPU affinity after the task switched to its user, which
        # the kernel allows a caller that is not the task's owner only with SYS_NICE; the base
        # layer's node sets add SYS_ADMIN (the jail plugin's private mount namespace)
        capabilities=(*DAEMON, "SYS_CHROOT", "SYS_NICE"),
        runs_users=True,
        runs_containers=True,
        after=(DIRECTORY,),  # SSSD answers from the start (offline until the directory is)
        env=_node_env,
    ),
    Role(
        LOGIN,
        image=LOGIN,
        command=("/usr/sbin/sshd", "-D", "-e"),
        ports=(Port("ssh", 22, publish="login.port", service_port=22),),
        probe=Probe(pid_file="/run/sshd.pid"),
        secrets=(MUNGE, LDAP_BIND),
        configs=(SLURM_CONF, JAIL_CONF, IDENTITY_CONF),
        jail="rw",
        # sshd chroots sessions into the jail, which needs /proc, /dev, the munge socket and the
        # client config mounted inside it (images/login/jail-mounts.sh)
        capabilities=(*DAEMON, "AUDIT_WRITE", "NET_BIND_SERVICE", "SYS_ADMIN", "SYS_CHROOT"),
        runs_users=True,
        stable_name=True,  # `invoke login`, kubectl exec login-0
        after=(CONTROLLER,),
        resources=Resources(("250m", "256Mi"), ("2", "2Gi")),
        env=_login_env,
    ),
    Role(
        DIRECTORY,
        image=DIRECTORY,
        ports=(Port("ldap", 389),),
        probe=Probe(listening=389),
        # the reader SSSD binds as gets this password when the directory is first made
        secrets=(LDAP_BIND,),
        configs=(DIRECTORY_CONF,),
        data=DIRECTORY_DATA,
        # its first start makes its data directory openldap's, then the server becomes openldap
        capabilities=("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"),
        resources=Resources(("100m", "64Mi"), ("1", "512Mi")),
        targets=("local",),
        when=sssd.embedded,
        env=_directory_env,
    ),
    Role(
        DATABASE,
        image=DATABASE,
        ports=(Port("mysql", 3306),),
        # through the socket: a TCP probe would log an aborted connection each time
        probe=Probe(command=("mariadb-admin", "ping")),
        secrets=(DB_PASSWORD,),
        data=DATABASE_DATA,
        # its first start makes its data directory mysql's, then the server becomes mysql
        capabilities=("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"),
        # the buffer pool (images/mariadb/slurmforge.cnf) grows to 2 GiB
        resources=Resources(("250m", "512Mi"), ("2", "3Gi")),
        grace_seconds=60,  # InnoDB shuts down cleanly
        networks=(DATABASE_NET,),  # slurmdbd alone reaches it (backups use its socket)
        when=own_database,
    ),
    Role(
        DBD,
        image=DBD,
        command=("slurmdbd", "-D"),
        ports=(Port("slurmdbd", 6819),),
        # ready once it listens: slurmdbd writes its pid file before it has reached the
        # database and before it takes requests (src/slurmdbd/slurmdbd.c)
        probe=Probe(listening=6819),
        secrets=(MUNGE, JWT, DB_PASSWORD, LDAP_BIND),
        configs=(DBD_CONF, IDENTITY_CONF),
        jail="ro",  # user names resolve as on the nodes (the jail's accounts)
        # starts as root, writes its config for SlurmUser and becomes it
        capabilities=DAEMON,
        fixed_hostname=True,
        after=(DATABASE, DIRECTORY),
        resources=Resources(("100m", "256Mi"), ("1", "1Gi")),
        # the clients (sacct, sacctmgr: users' too) and the controllers reach it; it reaches
        # the database
        networks=(CLUSTER_NET, DATABASE_NET),
        when=_accounting,
    ),
    Role(
        RESTD,
        image=RESTD,
        # it holds no key: each request's token is checked by slurmctld and slurmdbd
        ports=(Port("http", 6820, publish="rest.port"),),
        probe=Probe(listening=6820),
        secrets=(MUNGE,),
        configs=(SLURM_CONF,),
        jail="ro",
        capabilities=DAEMON,  # started as its own account (runuser)
        after=(CONTROLLER,),
        when=lambda spec: spec.rest.enabled,
    ),
    Role(
        EXPORTER,
        image=EXPORTER,
        # munged starts as root (the entrypoint), then the exporter, which reads the metrics
        # token as root and then becomes its own account
        command=(
            *("python3", "/usr/local/lib/slurmforge/slurm_exporter.py"),
            *("--user", EXPORTER_USER, "cluster"),
        ),
        ports=(EXPORTER_PORT,),
        probe=Probe(listening=EXPORTER_PORT.number),
        secrets=(MUNGE, METRICS_TOKEN),
        configs=(SLURM_CONF,),
        jail="ro",  # user names resolve as on the nodes
        capabilities=DAEMON,
        after=(CONTROLLER,),
        least_privilege=True,
        scraped=EXPORTER_PORT,
        # slurmctld and slurmdbd on the cluster's network; Prometheus on the management one
        networks=(CLUSTER_NET, MANAGEMENT_NET),
        when=_metrics,
        env=_exporter_env,
    ),
    Role(
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
    ),
    Role(
        PROMETHEUS,
        image=PROMETHEUS,
        ports=(Port("http", 9090, publish="metrics.prometheus.port"),),
        probe=Probe(listening=9090),
        secrets=(METRICS_TOKEN,),
        configs=(PROMETHEUS_CONF,),
        data=PROMETHEUS_DATA,
        after=(EXPORTER,),
        least_privilege=True,  # runs as the prometheus account, needing no capability at all
        targets=("local",),  # Kubernetes: the site's Prometheus, through the exporter's Service
        # off the cluster's network: no user's session or job reaches its port or its API
        networks=(MANAGEMENT_NET,),
        when=_prometheus,
    ),
    Role(
        PORTAL,
        image=PORTAL,
        ports=(Port("https", 8000, publish="portal.port"), PORTAL_API),
        probe=Probe(listening=8000),
        # the munge key for sbatch, squeue and scancel as each user (batchspawner, through sudo)
        secrets=(MUNGE, LDAP_BIND, PORTAL_COOKIE, PORTAL_PROXY, PORTAL_TLS, METRICS_TOKEN),
        configs=(SLURM_CONF, IDENTITY_CONF, PORTAL_CONF),
        # users and their password hashes as the login node reads them; a directory user's
        # home is made on the first start (pam_mkhomedir), as sshd makes it on the first login
        jail="rw",
        data=PORTAL_DATA,
        # runs as root: PAM checks passwords, sudo submits as the user
        capabilities=(*DAEMON, "AUDIT_WRITE"),
        runs_users=True,
        stable_name=True,  # notebook servers reach its API by name
        after=(CONTROLLER,),
        resources=Resources(("100m", "256Mi"), ("1", "1Gi")),
        scraped=PORTAL_API,  # the hub's own metrics
        metrics_path="/hub/metrics",
        networks=(CLUSTER_NET, MANAGEMENT_NET),  # Prometheus scrapes it there
        when=_portal,
        env=_portal_env,
    ),
    Role(
        POPULATE,
        image=JAIL,
        workload="job",
        command=(jail_contract.ROOT,),
        jail="rw",
        # copies a root filesystem with its owners, modes and file capabilities
        capabilities=("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD", "SETFCAP"),
        resources=Resources(("500m", "512Mi"), ("2", "2Gi")),
    ),
    Role(
        HEALTH_CHECK,
        image=LOGIN,  # set up like the login node: srun inside the jail
        workload="schedule",
        secrets=(MUNGE,),
        configs=(SLURM_CONF, JAIL_CONF),
        jail="rw",
        capabilities=(*DAEMON, "SYS_ADMIN", "SYS_CHROOT"),  # the login's jail mounts, chroot
        targets=("k8s",),  # local: `invoke gpu-check`
        when=_health_check,
    ),
    Role(
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
    ),
)
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
