"""Planned disruption of compute nodes (``disruption:``): how a deploy replaces the nodes whose
definition changed without ending their jobs as a lost node's.

A node being replaced is drained (no new job lands there), its jobs get ``max_wait`` to finish,
a batch job still running then is requeued under the same job ID, and a job that cannot be
requeued (interactive, or submitted with --no-requeue) is told why on its srun's error stream
and cancelled. Then its container is made again, and it is back in service once its slurmd has
registered. ``max_unavailable`` nodes of a set are away at once."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt

from slurmforge.deploy.spec.nodeset import MAX_NODES, Duration
from slurmforge.inputs import Model

# what the node images run to take a node (images/slurmd/node-state): a deploy's replacement
# locally, a pod's preStop on Kubernetes
NODE_STATE = "/usr/lib/slurmforge/node-state"
REPLACE_REASON = "deploy replaces it"  # its drain's reason, after "slurmforge: "


class DisruptionSpec(Model):
    """How nodes are taken for a change: drained, their jobs waited for, the rest requeued."""

    max_unavailable: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] = 1
    """How many nodes of one node set may be away at once: a deploy replaces this many at a
    time (each drained and waited for first); on Kubernetes, the node set's
    PodDisruptionBudget, which evictions (`kubectl drain`, a node pool upgrade) honour."""
    max_wait: Annotated[Duration, Field(ge=0, le=7 * 86400)] = 600
    """How long a node being replaced waits for its running jobs to end; those still running
    then are requeued under the same job ID (or, where they cannot be, cancelled with a
    message), never left to end as on a lost node."""
