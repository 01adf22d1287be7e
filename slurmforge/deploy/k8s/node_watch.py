"""node-watch's access (kubernetes.node_watch; roles/node_watch.py): a ServiceAccount of its own,
mounted into its pod alone, that may read the Kubernetes Nodes (a ClusterRole: get, list and
watch nodes, as Nodes are not namespaced) and list the pods of the cluster's namespace (a
Role), to know which Kubernetes node each node pod runs on. With a topology read from labels it
may also get and patch one ConfigMap, slurm-topology, where it writes topology.conf; it writes
nothing else through the API: what it does, it does in Slurm.
"""

from __future__ import annotations

import re
from typing import Any

from slurmforge.deploy.k8s.access import AccessRenderer
from slurmforge.deploy.roles import NODE_WATCH, TOPOLOGY_CONFIG, labelled


class WatchRenderer(AccessRenderer):
    def watch_access(self) -> dict[str, dict[str, Any]]:
        pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
        rules = [pods]
        if labelled(self.spec):  # topology.conf from the labels: that one ConfigMap
            rules.append(
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [TOPOLOGY_CONFIG],
                    "verbs": ["get", "patch"],
                }
            )
        nodes = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
        return self.account(NODE_WATCH, NODE_WATCH, rules, cluster_rules=[nodes])

    def with_watch_token(self, pod: dict[str, Any]) -> None:
        pod["containers"][0]["volumeMounts"].append(self.token_mount(NODE_WATCH))
        self.with_token(pod, NODE_WATCH)
        if self.k8s.overcommit:  # a lab's or a laptop's few cores: it asks for none of them
            pod["containers"][0]["resources"]["requests"]["cpu"] = "0"


def _placed(text: str) -> set[str]:
    """The nodes of a topology.conf node-watch wrote (it lists them one by one)."""
    return {n for lists in re.findall(r" Nodes=(\S+)", text) for n in lists.split(",")}


def keep_topology(kube: Any) -> None:
    """Before an apply: the topology.conf node-watch wrote from the labels stays (the deploy's
    own has every node unplaced until node-watch looks), unless the cluster file changed its
    kind (a tree's switches are no blocks) or its nodes (a scale: the new ones would be in no
    switch until node-watch looks again, and Slurm places no job on them)."""
    name = f"configmap-{TOPOLOGY_CONFIG}.yaml"
    if name not in kube.manifests.objects:
        return
    ours = kube.manifests.objects[name]
    kind = "SwitchName=" if kube.cluster.spec.topology.kind == "tree" else "BlockName="
    nodes = {node for ns in kube.cluster.spec.nodesets for node in ns.nodes}
    for live in kube.k.get("configmaps"):
        have = (live.get("data") or {}).get("topology.conf", "")
        if live["metadata"]["name"] != TOPOLOGY_CONFIG or kind not in have:
            continue
        if "[" not in have and _placed(have) == nodes:
            kube.manifests.rewrite(name, {**ours, "data": {"topology.conf": have}})
