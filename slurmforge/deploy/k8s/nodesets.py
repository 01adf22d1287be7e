"""The compute nodes: one StatefulSet per node set behind one headless Service; an elastic set's
nodes that Slurm starts and stops, one Deployment each (0 or 1 pod, named after the node)."""

from __future__ import annotations

from typing import Any

from slurmforge import jail_contract
from slurmforge.deploy.k8s.objects import (
    arch_affinity,
)
from slurmforge.deploy.k8s.pods import PodRenderer
from slurmforge.deploy.roles import (
    NODE,
    Role,
)
from slurmforge.deploy.spec.disruption import NODE_STATE
from slurmforge.deploy.spec.model import NodeSet
from slurmforge.pins import GNU_TYPES

NODES_SERVICE = "slurm-nodes"
# a node pod's preStop (drain, wait for the jobs, requeue the rest, then DOWN); the seconds its
# grace period holds past the jobs' (kubernetes.node_grace_seconds): requeueing what still runs,
# its processes' end (node-state waits 20 s at most), slurmd's own stop
STOP_MARGIN = 30
DRIVER_ROOT = "/run/nvidia/driver"  # where GPU pods see the node's driver directories


def driver_dirs(arch: str) -> tuple[str, ...]:
    """The node's driver directories a GPU pod mounts, relative to gpu.driver_root."""
    return (f"usr/lib/{GNU_TYPES[arch]}", "usr/bin")


# on an elastic node's Deployment and pod: the Slurm node it runs
NODE_LABEL = "slurmforge.io/node"


class NodeSetRenderer(PodRenderer):
    def node_set(self, role: Role, ns: NodeSet, config_hash: str) -> dict[str, Any]:
        """The set's nodes that always run (all of a fixed set's), pod ``<set>-<i>``. A changed
        template replaces no pod by itself (OnDelete): a deploy replaces them after their jobs
        (roll.py)."""
        pod = self.node_pod(role, ns)
        set_ = self.stateful_set(
            ns.name,
            NODE,
            len(ns.fixed_nodes),
            pod,
            config_hash,
            service=NODES_SERVICE,
            **{"slurmforge.io/nodeset": ns.name},
        )
        set_["spec"]["updateStrategy"] = {"type": "OnDelete"}
        return set_

    def disruption_budget(self, ns: NodeSet) -> dict[str, Any]:
        """How many of the set's node pods an eviction (`kubectl drain`, a node pool upgrade)
        may take at once: disruption.max_unavailable. Each one taken drains its Slurm node and
        requeues what still runs there (its preStop). policy/v1; apply gives a server older
        than 1.21 the same object as policy/v1beta1."""
        nodeset = {"slurmforge.io/nodeset": ns.name}
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": self.meta(ns.name, NODE, **nodeset),
            "spec": {
                "maxUnavailable": self.spec.disruption.max_unavailable,
                "selector": {"matchLabels": self.selector(NODE, **nodeset)},
            },
        }

    def elastic_node(self, role: Role, ns: NodeSet, node: str, config_hash: str):
        """One node Slurm starts and stops: a Deployment of no pod until node-power scales it
        to one (replicas here are 0; apply keeps a running node's). Its pod is host ``node``
        in the nodes' Service, so it is ``node.slurm-nodes`` like any other node; it is never
        doubled (Recreate), and slurmd reports its own start as the node's boot (-b: Slurm
        waits for a resumed node to have booted since it asked)."""
        pod = self.node_pod(role, ns, node)
        pod["hostname"], pod["subdomain"] = node, NODES_SERVICE
        extra = {"slurmforge.io/nodeset": ns.name, NODE_LABEL: node}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.meta(node, NODE, **extra),
            "spec": {
                "replicas": 0,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": self.selector(NODE, **extra)},
                "template": self.template(NODE, pod, config_hash, **extra),
            },
        }

    def node_pod(self, role: Role, ns: NodeSet, elastic: str | None = None) -> dict[str, Any]:
        """A node's pod: of the set's StatefulSet, or with ``elastic`` that elastic node's."""
        volumes, mounts = self.volumes(role)
        arch = self.cluster.arch(ns)
        usr_arch = None if arch == self.cluster.cell.arch else arch
        if usr_arch:  # the jail, as nodes of its arch see it: with that arch's /usr
            volumes.append(self.jail_volume(usr_arch))
            mounts.insert(mounts.index({"name": "jail", "mountPath": jail_contract.ROOT}) + 1,
                          self.usr_mount(usr_arch))  # fmt: skip
        name: dict[str, Any] = (
            {"value": elastic}
            if elastic
            else {"valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        )
        env = [
            {"name": "POD_NAME", **name},
            *({"name": k, "value": v} for k, v in sorted(ns.env.items())),
        ]
        limits = {
            "cpu": str(ns.cpus),
            "memory": f"{ns.memory_mb}Mi",
            **({"nvidia.com/gpu": str(ns.gpus)} if ns.gpus else {}),
        }
        if ns.gpus:
            root = self.spec.gpu.driver_root.rstrip("/")
            for i, sub in enumerate(driver_dirs(arch)):
                volumes.append(
                    {
                        "name": f"driver-{i}",
                        "hostPath": {"path": f"{root}/{sub}", "type": "Directory"},
                    }
                )
                mounts.append(
                    {"name": f"driver-{i}", "mountPath": f"{DRIVER_ROOT}/{sub}", "readOnly": True}
                )
            env.append({"name": "SLURMFORGE_DRIVER_ROOT", "value": DRIVER_ROOT})
        # preStop waits for the jobs up to node_grace_seconds, names the Kubernetes node in the
        # drain's reason, and requeues what still runs within the pod's grace period
        grace = self.k8s.node_grace_seconds
        env.append({"name": "NODE_STATE_GRACE", "value": str(grace)})
        if not elastic:
            env.append(
                {"name": "KUBE_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
            )
            env.append(
                {
                    "name": "NODE_STATE_REASON",
                    "value": "pod stopping on kubernetes node $(KUBE_NODE)",
                }
            )
        args = ["$(POD_NAME)" if a == "{node}" else a for a in role.command]
        if elastic:
            args.append("-b")
        image = self.images.refs[self.cluster.image_key(ns.image, arch)]
        container = self.container(role, image, mounts, args, env, ns.capabilities)
        container["resources"] = {"requests": self.node_requests(limits), "limits": limits}
        # a pod being deleted drains its node and lets its jobs finish within node_grace_seconds;
        # the batch jobs still running then are requeued under their IDs, the others cancelled
        # with a word to their srun (images/slurmd/node-state). Not an elastic node's: Slurm
        # stops it when it has no job, and marks it powered down itself.
        if not elastic:
            container["lifecycle"] = {"preStop": {"exec": {"command": [NODE_STATE, "stopping"]}}}
        extra: dict[str, Any] = {}
        terms: list[dict[str, Any]] = []
        for e in ns.affinity.matchExpressions:
            terms.append({"key": e.key, "operator": e.operator})
            if e.values:
                terms[-1]["values"] = list(e.values)
        if ns.arch is not None:  # its arch's nodes, which pull its arch's image
            extra["affinity"] = arch_affinity(ns.arch, terms)
        elif terms:
            extra["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": terms}]
                    }
                }
            }
        # the pod's pause process is PID 1 and reaps what slurmd does not: each slurmstepd
        # daemonizes (its parent exits), so its exit would leave a zombie under a slurmd PID 1
        extra["shareProcessNamespace"] = True
        pod = self.pod_spec([container], volumes, usr_arch=usr_arch, **extra)
        pod["terminationGracePeriodSeconds"] = grace + STOP_MARGIN
        return pod

    def node_requests(self, limits: dict[str, str]) -> dict[str, str]:
        """What a node pod requests: its limits, or with kubernetes.overcommit next to nothing
        (GPUs are never overcommitted)."""
        if not self.k8s.overcommit:
            return dict(limits)
        return {**limits, "cpu": "100m", "memory": "128Mi"}
