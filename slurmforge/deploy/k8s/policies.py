"""Who may open a connection to the cluster's pods on Kubernetes: the zones of roles/'s networks
as NetworkPolicies, where the cluster's network plugin enforces them (the lab's does not; the API
server validates them).

Every pod of the cluster is selected by one of these, so a connection none of them admits is
refused:
- ``cluster``: the pods of roles on the cluster's network (Slurm's daemons, the nodes, the login
  node, the portal) take connections from the cluster's own pods, on any port (slurmd, srun's
  and MPI's ports are many);
- a role off that network (the database) takes them only from the roles it shares a network
  with, on its own ports;
- a role's published ports (ssh, the portal, REST) and the port Prometheus scrapes are open to
  any source, inside the Kubernetes cluster or out: a site's Prometheus runs in a namespace of its
  own, and each scrape presents the metrics token (roles.METRICS_TOKEN).
The policies select this cluster's pods alone: a namespace shared with other workloads keeps its
own rules for them.
"""

from __future__ import annotations

from typing import Any

from slurmforge.deploy import roles
from slurmforge.deploy.k8s.objects import ObjectBuilder
from slurmforge.deploy.roles import Role

COMPONENT = "app.kubernetes.io/component"


class PolicyRenderer(ObjectBuilder):
    def network_policies(self, running: list[Role]) -> dict[str, dict[str, Any]]:
        """File name → NetworkPolicy, for the roles in ``running``."""
        apart = [r for r in running if roles.CLUSTER_NET not in roles.networks_of(r, running)]
        cluster = self.selector("")
        del cluster[COMPONENT]  # the cluster's pods, whatever their role
        selected: dict[str, Any] = {"matchLabels": cluster}
        if apart:
            selected["matchExpressions"] = [
                {"key": COMPONENT, "operator": "NotIn", "values": [r.name for r in apart]}
            ]
        inside = {"from": [{"podSelector": {"matchLabels": cluster}}]}
        out = {"networkpolicy-cluster.yaml": self._policy("cluster", "network", selected, [inside])}
        for role in apart:
            out[f"networkpolicy-{role.name}.yaml"] = self._apart(role, running)
        for role in running:
            ports = [p for p in role.ports if p.publish or p is role.scraped]
            if ports:
                rule = {"ports": [{"protocol": "TCP", "port": p.number} for p in ports]}
                selector = {"matchLabels": self.selector(role.name)}
                name = f"{role.name}-reached"
                out[f"networkpolicy-{name}.yaml"] = self._policy(name, role.name, selector, [rule])
        return out

    def _apart(self, role: Role, running: list[Role]) -> dict[str, Any]:
        """A role off the cluster's network: its pods take connections only from the pods of
        the roles that share a network with it, on its own ports."""
        mine = set(roles.networks_of(role, running))
        peers = [
            r for r in running if r.name != role.name and mine & set(roles.networks_of(r, running))
        ]
        rule = {
            "from": [{"podSelector": {"matchLabels": self.selector(r.name)}} for r in peers],
            "ports": [{"protocol": "TCP", "port": p.number} for p in role.ports],
        }
        selector = {"matchLabels": self.selector(role.name)}
        return self._policy(role.name, role.name, selector, [rule])

    def _policy(
        self, name: str, component: str, pods: dict[str, Any], ingress: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": self.meta(name, component),
            "spec": {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": ingress},
        }
