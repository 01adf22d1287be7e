"""What Prometheus is given for a cluster: the alert rules (both targets) and, for the local
target's own Prometheus, its prometheus.yml.

The rules are written as data, with the cluster file's thresholds (metrics.*), and land
- locally in etc/prometheus/slurm-alerts.rules.yml beside the Compose file, which the local
  Prometheus loads and a site's own Prometheus can load as it is;
- on Kubernetes in a PrometheusRule (applied where a Prometheus Operator serves the kind).
monitoring/rules-test.yml unit-tests them with `promtool test rules` (the image tier), and
monitoring/dashboards/ holds the Grafana dashboards drawn from the same series.
"""

from __future__ import annotations

from typing import Any

from slurmforge.deploy import roles
from slurmforge.deploy.spec.model import Cluster

RULES_FILE = "slurm-alerts.rules.yml"
CONFIG_FILE = "prometheus.yml"
EXPORTER_JOB, GPU_JOB, PORTAL_JOB = "slurm", "slurm-gpu", "portal"


def _alert(name: str, expr: str, after: str, severity: str, summary: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": after,
        "labels": {"severity": severity},
        "annotations": {"summary": summary},
    }


def rules(cluster: Cluster) -> dict[str, Any]:
    """The alert rules' file (Prometheus' rule file format)."""
    pending = cluster.spec.metrics.pending_alert_after
    alerts = [
        _alert(
            "SlurmExporterDown",
            f'up{{job="{EXPORTER_JOB}"}} == 0',
            "2m",
            "warning",
            "the Slurm exporter {{ $labels.instance }} does not answer scrapes",
        ),
        _alert(
            "SlurmctldUnreachable",
            "slurm_up == 0",
            "1m",
            "critical",
            "slurmctld does not answer the exporter: no job can be submitted or scheduled",
        ),
        _alert(
            "SlurmdbdUnreachable",
            "slurm_dbd_up == 0",
            "2m",
            "critical",
            "slurmdbd does not answer sacct: accounting records queue in slurmctld",
        ),
        _alert(
            "SlurmNodeDown",
            'slurm_node_state{state=~"down|not_responding|fail"} == 1',
            "5m",
            "warning",
            "node {{ $labels.node }} is {{ $labels.state }}",
        ),
        _alert(
            "SlurmNodeDrained",
            'slurm_node_drain_info{cause!~"gpu-health-check|health-check"} == 1',
            "15m",
            "warning",
            "node {{ $labels.node }} is drained ({{ $labels.cause }}): {{ $labels.reason }}",
        ),
        _alert(
            "SlurmNodeGpuHealthCheckFailed",
            'slurm_node_drain_info{cause="gpu-health-check"} == 1',
            "0m",
            "critical",
            "the GPU health check drained {{ $labels.node }}: {{ $labels.reason }}",
        ),
        _alert(
            "SlurmNodeHealthCheckFailed",
            'slurm_node_drain_info{cause="health-check"} == 1',
            "2m",
            "warning",
            "node {{ $labels.node }} failed its health check: {{ $labels.reason }}",
        ),
        _alert(
            "SlurmJobPendingTooLong",
            f"slurm_jobs_pending_oldest_seconds > {pending}",
            "5m",
            "warning",
            f"a job in partition {{{{ $labels.partition }}}} has waited more than {pending} s",
        ),
    ]
    return {"groups": [{"name": "slurmforge", "rules": alerts}]}


def prometheus_config(cluster: Cluster, gpu_nodes: list[str]) -> dict[str, Any]:
    """The local Prometheus' configuration: the exporter, each GPU node's collector, the portal's
    hub (each scrape with the cluster's metrics token), the rules."""
    interval = f"{cluster.spec.metrics.prometheus.scrape_interval}s"
    scrape = [
        {
            "job_name": EXPORTER_JOB,
            "static_configs": [{"targets": [f"{roles.EXPORTER}:{roles.EXPORTER_PORT.number}"]}],
        }
    ]
    if gpu_nodes:
        scrape.append(
            {
                "job_name": GPU_JOB,
                "static_configs": [
                    {
                        "targets": [
                            f"{node}-gpu-metrics:{roles.GPU_METRICS_PORT}" for node in gpu_nodes
                        ]
                    }
                ],
            }
        )
    if cluster.spec.portal.enabled:  # the hub's own metrics, on its API port
        scrape.append(
            {
                "job_name": PORTAL_JOB,
                "metrics_path": roles.role(roles.PORTAL).metrics_path,
                "static_configs": [{"targets": [f"{roles.PORTAL}:{roles.PORTAL_API.number}"]}],
            }
        )
    # each scrape presents the metrics token, which Prometheus reads as the file's group
    token = f"{roles.LOCAL_SECRETS_DIR}/{roles.METRICS_TOKEN.file}"
    for job in scrape:
        job["authorization"] = {"type": "Bearer", "credentials_file": token}
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "external_labels": {"cluster": cluster.name},
        },
        "rule_files": [f"{roles.PROMETHEUS_CONF.path}/{RULES_FILE}"],
        "scrape_configs": scrape,
    }
