"""Each feature's part of slurm.conf: a fragment under templates/slurm.conf.d/, named for the
feature, and what it is given: the cluster's own setting where that is all it needs (cgroups,
node_ssh, private_data), else the function of the same name here (None or empty: the cluster
does not have it, and the fragment writes nothing). conf.render gives each its values under its
name and slurm.conf.j2 includes the fragments where their lines go: a new feature adds a
fragment, its function and one include (docs: Layout)."""

from __future__ import annotations

from typing import Any

from slurmforge import jail_contract, matrix
from slurmforge.deploy.slurm.hostlist import hostlist
from slurmforge.deploy.spec import health as health_spec
from slurmforge.deploy.spec import tres
from slurmforge.deploy.spec.model import Cluster


def failover(cluster: Cluster, primary_on: str) -> dict[str, Any] | None:
    """A backup controller: how long the primary may be silent, and what a controller runs when
    it takes control (templates/primary-on.j2)."""
    if cluster.spec.controller.replicas < 2:
        return None
    return {"after": cluster.spec.controller.failover_after, "primary_on": primary_on}


def accounting(cluster: Cluster, dbd_addr: str, jwt_key: str) -> dict[str, Any] | None:
    """slurmdbd, where jobs are accounted: where slurmctld reaches it, what it enforces and
    tracks, and the key of the tokens it and slurmctld accept."""
    spec = cluster.spec
    if not spec.accounting.enabled:
        return None
    return {
        "spec": spec.accounting,
        "dbd_addr": dbd_addr,
        "tracked_tres": tres.tracked(spec),
        "jwt_key": jwt_key,
    }


def monitoring(cluster: Cluster) -> bool:
    """slurmctld serves OpenMetrics itself from Slurm 25.11 on; turned on where metrics are and
    no PrivateData is set. The endpoint asks no one who they are, so slurmctld answers 401 to
    every request where any PrivateData is set (src/slurmctld/http.c): the exporter takes the
    same counters from sdiag there."""
    spec = cluster.spec
    return (
        spec.metrics.enabled
        and not spec.slurm.private_data
        and matrix.slurm_at_least(cluster.cell.slurm, (25, 11))
    )


def power(cluster: Cluster, names_resolve: bool, program: str) -> dict[str, str] | None:
    """What slurm.conf says for elastic node sets (None: there are none): the program Slurm
    runs to start and stop their nodes, the nodes it never stops, and how a started node is
    found: by its name (``names_resolve``: the local target's network resolves each node's
    container name), else at the address it registers from (Kubernetes: `cpu-2` alone is no
    name there, and Slurm resets a powered-down node's NodeAddr to its name)."""
    if not cluster.elastic:
        return None
    keep = [hostlist(ns.fixed_nodes) for ns in cluster.spec.nodesets if ns.fixed_nodes]
    found = "cloud_dns" if names_resolve else "cloud_reg_addrs"
    return {"program": program, "keep": ",".join(keep), "found": found}


def gres(cluster: Cluster) -> list[str]:
    """The GRES names the node sets declare (gpu, ...): gres.conf says which node has what."""
    return sorted({g.split(":")[0] for ns in cluster.spec.nodesets for g in ns.gres})


def scripts(written: dict[str, str], conf_dir: str) -> dict[str, Any]:
    """What Prolog= and Epilog= name: the pattern of the site's scripts written for each, if any
    (conf.scripts_of names them so that Slurm runs them in the cluster file's order)."""

    def pattern(kind: str) -> str | None:
        return f"{conf_dir}/{kind}-*" if any(n.startswith(f"{kind}-") for n in written) else None

    return {
        "prolog": pattern("prolog"),
        "epilog": pattern("epilog"),
        "jail_root": jail_contract.ROOT,
    }


def topology(cluster: Cluster) -> str | None:
    """The topology plugin a declared topology takes (conf writes its topology.conf)."""
    declared = cluster.spec.topology
    return None if declared is None else declared.kind


def health(cluster: Cluster) -> dict[str, Any] | None:
    """The node health check (images/slurmd/node-health): what slurmd runs, how often, and on
    which nodes."""
    spec = cluster.spec.health
    if not spec.enabled:
        return None
    return {
        "program": health_spec.PROGRAM,
        "interval": spec.interval,
        "states": ",".join(s.upper() for s in spec.node_states),
    }
