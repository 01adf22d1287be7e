"""Metrics (metrics:): the exporter, the local Prometheus, and the token every scrape presents."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge.deploy.roles.base import CONTROLLER, MUNGE, SLURM_CONF
from slurmforge.deploy.roles.records import (
    CLUSTER_NET,
    DAEMON,
    MANAGEMENT_NET,
    ConfigDir,
    Data,
    Port,
    Probe,
    Role,
    Secret,
)

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


EXPORTER, PROMETHEUS = "exporter", "prometheus"


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

# the local Prometheus' prometheus.yml and alert rules (deploy/monitoring.py)
PROMETHEUS_CONF = ConfigDir("prometheus-config", "etc/prometheus", "/etc/slurmforge/prometheus")

PROMETHEUS_DATA = Data("/var/lib/prometheus/metrics2", "metrics", "metrics", "state")


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


EXPORTER_PORT = Port("metrics", 9341)

# the exporter's account (images/runtime): with accounting, a Slurm operator, so that it sees
# every user's jobs where PrivateData hides them from ordinary users (slurm/database.py)
EXPORTER_USER = "slurm-exporter"

GPU_METRICS_PORT = 9342  # `slurm_exporter.py gpu` beside each GPU node (local target)

EXPORTER_ROLE = Role(
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
)


PROMETHEUS_ROLE = Role(
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
)
