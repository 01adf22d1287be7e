"""The web portal's settings for its hub: what images/portal/slurmforge_portal.py reads from
portal.yaml (the generated configuration's PORTAL_CONF)."""

from __future__ import annotations

from typing import Any

from slurmforge.deploy import generated, roles
from slurmforge.deploy.spec.checks import portal_limits, portal_partition
from slurmforge.deploy.spec.model import Cluster
from slurmforge.deploy.spec.portal import NOTEBOOK_VENV

SETTINGS_FILE = "portal.yaml"
# the jail's JupyterLab, batchspawner-singleuser and jupyterhub-singleuser (images/jail)
JUPYTER = f"{NOTEBOOK_VENV}/bin"


def settings(cluster: Cluster, node_domain: str = "") -> dict[str, Any]:
    """``node_domain``: what a node's name needs after it for the hub to reach its notebook
    server (Kubernetes: the nodes' headless Service; Compose resolves the bare name)."""
    spec = cluster.spec
    form = spec.portal.form
    return {
        "hub_host": roles.PORTAL,  # its Compose service, its Kubernetes Service
        "node_domain": node_domain,
        "jupyter": JUPYTER,
        "partitions": {p.name: portal_limits(spec, p) for p in spec.partitions},
        "form": {
            "partition": portal_partition(spec).name,
            "cpus": form.cpus,
            "memory_mb": form.memory_mb,
            "time": form.time,
            "gpus": form.gpus,
        },
        # notebook servers (jobs) write files with the sessions' umask (identity.home_mode)
        "umask": spec.identity.umask,
        "idle_timeout": spec.portal.idle_timeout,
        "start_timeout": spec.portal.start_timeout,
    }


def files(cluster: Cluster, node_domain: str = "") -> dict[str, str]:
    """PORTAL_CONF's files (none without the portal)."""
    if not cluster.spec.portal.enabled:
        return {}
    text = generated.dump_yaml(settings(cluster, node_domain), str(cluster.path))
    return {SETTINGS_FILE: text}
