"""Reading a cluster file: its node sets' layers applied, node counts overridden, the schema
validated, the checks across its parts run, and its images bound to one build cell. Reads the
cluster file and what it names, nothing else: the caller gives the node counts `invoke scale`
kept."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from slurmforge import matrix
from slurmforge.config import Config
from slurmforge.deploy.spec import bind, checks
from slurmforge.deploy.spec.layers import Layers
from slurmforge.deploy.spec.model import Cluster, ClusterSpec
from slurmforge.errors import ConfigError
from slurmforge.inputs import read_yaml, validate

Scale = Callable[[str], Mapping[str, int]]  # the cluster's name → node set → node count


def no_scale(name: str) -> Mapping[str, int]:
    return {}


def load(path: Path, config: Config, scale: Scale | Mapping[str, int] = no_scale) -> Cluster:
    """The cluster in ``path``, with layers applied, node counts from ``scale`` (a mapping, or a
    function of the cluster's name giving one) over the file's, and images bound."""
    raw = read_yaml(path)
    nodesets = raw.get("nodesets")
    layers = None
    if isinstance(nodesets, list):
        layers_dir = path.parent / str(raw.get("layers", "layers"))
        layers = Layers(path, nodesets, layers_dir)
        raw["nodesets"] = [layers.resolve(i, ns) for i, ns in enumerate(nodesets)]
    name = raw.get("name")
    if isinstance(name, str) and isinstance(raw.get("nodesets"), list):
        counts = scale if isinstance(scale, Mapping) else scale(name)
        for ns in raw["nodesets"]:
            if isinstance(ns, dict) and isinstance(ns.get("name"), str) and ns["name"] in counts:
                ns["replicas"] = counts[ns["name"]]
    spec = validate(ClusterSpec, raw, path, blame=layers.blame if layers else None)
    checks.check(path, spec)
    cell, images, hint = bind.bind_images(path, spec, config)
    if (
        spec.topology
        and spec.topology.block_sizes
        and not matrix.slurm_at_least(cell.slurm, (24, 5))
    ):
        raise ConfigError(
            f"{path}: topology.block_sizes: Slurm {cell.slurm} has no BlockSizes (24.05 and "
            "later); leave it out"
        )
    return Cluster(spec, path, cell, images, hint)
