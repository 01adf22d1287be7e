"""A node set of the cluster file (``nodesets[]``): its nodes' shape, where they run, and whether
Slurm starts and stops them (``elastic``)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictInt,
    StringConstraints,
    model_validator,
)

from slurmforge.deploy.spec.fields import (
    Capability,
    DNSName,
    EnvName,
    Word,
)
from slurmforge.deploy.spec.site import ConfKey, LineValue
from slurmforge.errors import quote
from slurmforge.inputs import Model
from slurmforge.pins import Arch


class MatchExpression(Model):
    key: Annotated[str, StringConstraints(strict=True, min_length=1)]
    """A Kubernetes node label."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    """How the label is matched."""
    values: tuple[Annotated[str, StringConstraints(strict=True)], ...] = ()
    """The values it is matched against."""


class Affinity(Model):
    """Node affinity for targets that schedule onto machines (Kubernetes); ignored locally."""

    matchExpressions: tuple[MatchExpression, ...] = ()
    """Required node affinity: every expression must match."""


DURATION = re.compile(r"(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")


def _seconds(value: Any) -> Any:
    """A duration as seconds: a number of seconds, or 90s, 5m, 1h30m."""
    if isinstance(value, str):
        found = DURATION.fullmatch(value)
        if not value or found is None:
            raise ValueError(
                f"expected a duration such as 90s, 5m or 1h30m (or seconds), got {quote(value)}"
            )
        hours, minutes, seconds = (int(part or 0) for part in found.groups())
        return hours * 3600 + minutes * 60 + seconds
    return value


# seconds, written as a number or as 90s, 5m, 1h30m
Duration = Annotated[
    StrictInt,
    BeforeValidator(
        _seconds,
        json_schema_input_type=int
        | Annotated[str, StringConstraints(pattern=f"^{DURATION.pattern}$")],
    ),
]

# the most nodes of a set: Slurm writes them as one host range, NAME-[0-N], and its hostlist
# takes at most 65,536 hosts in a range (src/common/hostlist.c, MAX_RANGE). Where they run bounds
# them further: a local cluster's network (local/preflight.py), a Kubernetes cluster's capacity.
MAX_NODES = 65536


class ElasticSpec(Model):
    """A node set whose nodes Slurm starts when jobs need them and stops when idle (its power
    saving: ResumeProgram and SuspendProgram); its first ``min`` nodes always run."""

    min: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)] = 0
    """Nodes that always run."""
    max: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)]
    """The most nodes the set has (its replicas)."""
    idle: Annotated[Duration, Field(ge=30, le=7 * 86400)] = 300
    """A node without a job this long is stopped (the partition's SuspendTime)"""
    start_timeout: Annotated[Duration, Field(ge=30, le=3600)] = 300
    """A node not in service this long after its start is marked down (ResumeTimeout), and its job
    is requeued onto others"""


class NodeSet(Model):
    name: DNSName
    """The node set's name; its nodes are NAME-0, NAME-1, ..."""
    replicas: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)]
    """An elastic set has elastic.max nodes, which are its replicas"""
    elastic: ElasticSpec | None = None
    """Nodes that Slurm starts when jobs need them and stops when idle."""
    image: DNSName
    """The component image its nodes run (slurmd, or worker for GPU nodes)."""
    arch: Arch | None = None
    """The CPU arch of its machines (default: the cluster's cell's); another arch's node sets run
    the same set's cell of that arch (Grace GPU nodes beside amd64 controllers)"""
    cpus: Annotated[StrictInt, Field(ge=1)]
    """CPUs of each node (what slurm.conf says and the container is limited to)."""
    memory_mb: Annotated[StrictInt, Field(ge=64)]
    """Memory of each node in MiB (RealMemory, and the container's limit)."""
    features: tuple[Word, ...] = ()
    """Slurm node features (for --constraint)."""
    gres: tuple[Word, ...] = ()
    """Generic resources, such as gpu:4 or gpu:h100:8."""
    capabilities: tuple[Capability, ...] = ()
    """Linux capabilities the node container gets."""
    env: dict[EnvName, Annotated[str, StringConstraints(strict=True)]] = Field(default_factory=dict)
    """Environment variables of the node container."""
    affinity: Affinity = Affinity()
    """Where its pods may run (Kubernetes)."""
    slurm: dict[ConfKey, LineValue] = Field(default_factory=dict)
    """More of the node set's NodeName line (Weight, TmpDisk, CoreSpecCount, ...)"""

    @model_validator(mode="before")
    @classmethod
    def _elastic_size(cls, data: Any) -> Any:
        """An elastic set's size is its elastic.max; replicas beside it would say it twice."""
        if isinstance(data, dict) and isinstance(data.get("elastic"), dict):
            if "replicas" in data:
                raise ValueError(
                    "replicas: an elastic node set has elastic.max nodes; leave replicas out"
                )
            data = {**data, "replicas": data["elastic"].get("max", 0)}
        return data

    @property
    def nodes(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.replicas)]

    @property
    def fixed_nodes(self) -> list[str]:
        """The nodes that always run: all of a fixed set, an elastic set's first ``min``."""
        return self.nodes[: self.elastic.min] if self.elastic else self.nodes

    @property
    def elastic_nodes(self) -> list[str]:
        """The nodes Slurm starts and stops (State=CLOUD)."""
        return self.nodes[self.elastic.min :] if self.elastic else []

    @property
    def gpus(self) -> int:
        """GPUs each node asks for: the sum of its ``gpu[:type]:count`` GRES."""
        return sum(int(g.rsplit(":", 1)[1]) for g in self.gres if g.split(":")[0] == "gpu")
