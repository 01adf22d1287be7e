"""What the Kubernetes nodes say about themselves (``kubernetes.node_watch``): a preemption
notice or an unhealthy condition on a Kubernetes node acts on the Slurm nodes whose pods run
there, before the pods are deleted.

- ``preemption``: the node is about to go (a Spot reclaim, a scale-down): its Slurm nodes are
  drained at once and their running jobs requeued under the same IDs (those Slurm cannot
  requeue are told why and cancelled), within seconds of the notice rather than at the pod's
  deletion.
- ``unhealthy``: the node is sick (node-problem-detector's conditions): its Slurm nodes are
  drained, their jobs left to finish, and resumed once the notice clears.

A notice is a taint (``key`` or ``key=value``; its effect does not matter), a label (the same)
or a Node condition whose status is True (its type). Keys follow Kubernetes' grammar of
qualified names: an optional DNS-subdomain prefix and '/', then a name of at most 63
characters.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool

from slurmforge.deploy.spec.fields import Condition, KeyValue
from slurmforge.deploy.spec.nodeset import Duration
from slurmforge.inputs import Model


class NoticeSpec(Model):
    """What marks a Kubernetes node: any one of these on it."""

    taints: tuple[KeyValue, ...] = ()
    """Taints (key, or key=value), whatever their effect."""
    labels: tuple[KeyValue, ...] = ()
    """Labels (key, or key=value)."""
    conditions: tuple[Condition, ...] = ()
    """Node conditions whose status is True (their type)."""

    def any(self) -> bool:
        return bool(self.taints or self.labels or self.conditions)


# The clouds' own notices that a node is about to be taken: GKE's taint on a Spot or preemptible
# VM being reclaimed; AWS Node Termination Handler's taints (a Spot interruption, an Auto
# Scaling group's termination, scheduled maintenance); Karpenter's on a node it is disrupting
# (karpenter.sh/disrupted from v1, karpenter.sh/disruption before).
PREEMPTION = NoticeSpec(
    taints=(
        "cloud.google.com/impending-node-termination",
        "aws-node-termination-handler/spot-itn",
        "aws-node-termination-handler/asg-lifecycle-termination",
        "aws-node-termination-handler/scheduled-maintenance",
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption=disrupting",
    )
)

# node-problem-detector's permanent problems in its shipped configuration
UNHEALTHY = NoticeSpec(conditions=("KernelDeadlock", "ReadonlyFilesystem"))


class NodeWatchSpec(Model):
    """A watcher of the Kubernetes nodes the node pods run on (k8s; ignored by `local`)."""

    enabled: StrictBool = False
    """Run it: a Deployment whose ServiceAccount may read the Kubernetes Nodes (a ClusterRole:
    get, list and watch nodes, nothing else) and list this namespace's pods; off by default, as
    a ClusterRole is cluster-wide and not every deployer may make one."""
    interval: Annotated[Duration, Field(ge=1, le=300)] = 5
    """How often it looks (one list of the Nodes and one of the node pods per look)."""
    preemption: NoticeSpec = PREEMPTION
    """A Kubernetes node about to go: its Slurm nodes drain and their jobs are requeued at
    once."""
    unhealthy: NoticeSpec = UNHEALTHY
    """A sick Kubernetes node: its Slurm nodes drain while the notice stands, and resume when
    it clears."""
