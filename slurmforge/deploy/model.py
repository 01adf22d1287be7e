"""The typed deployment model: one cluster, its node sets, partitions, images, volumes, secrets.

Loaded from a cluster file (deploy/cluster.yaml by default) whose node sets may use layered
``definitions`` (see layers.py). The same model feeds the Slurm configuration and every target's
renderer.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, StringConstraints

from slurmforge import matrix
from slurmforge.config import Config, Model, format_path, read_yaml, validate
from slurmforge.deploy.layers import Layers
from slurmforge.errors import ConfigError

# node and service names: DNS labels short enough for Slurm node names with a "-<index>" suffix
DNSName = Annotated[
    str, StringConstraints(strict=True, pattern=r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
]
Word = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.:/=-]+$")]
Capability = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Z][A-Z_]+$")]
AbsPath = Annotated[str, StringConstraints(strict=True, pattern=r"^/[^\s:]*$")]
EnvName = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# Components that run as part of the cluster (the rest are build stages).
CONTROLLER, LOGIN, JAIL = "slurmctld", "login", "jail"


class MatchExpression(Model):
    key: Annotated[str, StringConstraints(strict=True, min_length=1)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[Annotated[str, StringConstraints(strict=True)], ...] = ()


class Affinity(Model):
    """Node affinity for targets that schedule onto machines (Kubernetes); ignored locally."""

    matchExpressions: tuple[MatchExpression, ...] = ()


class NodeSet(Model):
    name: DNSName
    replicas: Annotated[StrictInt, Field(ge=0, le=256)]
    image: DNSName
    cpus: Annotated[StrictInt, Field(ge=1)]
    memory_mb: Annotated[StrictInt, Field(ge=64)]
    features: tuple[Word, ...] = ()
    gres: tuple[Word, ...] = ()
    capabilities: tuple[Capability, ...] = ()
    env: dict[EnvName, Annotated[str, StringConstraints(strict=True)]] = Field(default_factory=dict)
    affinity: Affinity = Affinity()

    @property
    def nodes(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.replicas)]

    @property
    def gpus(self) -> int:
        """GPUs each node asks for: the sum of its ``gpu[:type]:count`` GRES."""
        return sum(int(g.rsplit(":", 1)[1]) for g in self.gres if g.split(":")[0] == "gpu")


class Partition(Model):
    name: DNSName
    nodesets: tuple[DNSName, ...] = Field(min_length=1)
    default: StrictBool = False
    max_time: Annotated[str, StringConstraints(strict=True, pattern=r"^(INFINITE|[0-9:-]+)$")] = (
        "INFINITE"
    )


class LoginSpec(Model):
    address: Annotated[str, StringConstraints(strict=True, pattern=r"^[0-9.]+$")] = "127.0.0.1"
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 2222


class JailSpec(Model):
    # user state kept by every populate, in addition to /home, /opt/user and the SSH host keys
    keep: tuple[AbsPath, ...] = ()


class GpuSpec(Model):
    # where the host's NVIDIA driver is found (its files are mounted read-only into GPU nodes)
    driver_root: AbsPath = "/"
    # the GPU health check drains a node whose all_reduce_perf bus bandwidth is below this (GB/s)
    min_busbw: Annotated[float, Field(strict=True, gt=0)] = 100.0


class ImagesSpec(Model):
    set: Annotated[str, StringConstraints(strict=True)] = "default"
    cell: Annotated[str, StringConstraints(strict=True)] | None = None


class ClusterSpec(Model):
    name: DNSName
    images: ImagesSpec = ImagesSpec()
    login: LoginSpec = LoginSpec()
    jail: JailSpec = JailSpec()
    gpu: GpuSpec = GpuSpec()
    layers: Annotated[str, StringConstraints(strict=True)] = "layers"
    nodesets: tuple[NodeSet, ...] = Field(min_length=1)
    partitions: tuple[Partition, ...] = Field(min_length=1)


@dataclass(frozen=True)
class Cluster:
    """A validated cluster bound to one build cell: image references, paths, Slurm version."""

    spec: ClusterSpec
    path: Path
    cell: matrix.Cell
    images: dict[str, str]  # component → image reference
    build_hint: str  # the `invoke build` that produces these images

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nodes(self) -> list[tuple[NodeSet, str]]:
        return [(ns, node) for ns in self.spec.nodesets for node in ns.nodes]

    def nodeset(self, name: str) -> NodeSet:
        return next(ns for ns in self.spec.nodesets if ns.name == name)


def state_dir(cluster_name: str) -> Path:
    """Where a cluster's secrets and scale live: outside the repository, never in an image."""
    base = os.environ.get("SLURMFORGE_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "slurmforge"
    )
    return Path(base) / cluster_name


def load(path: Path, config: Config) -> Cluster:
    """The cluster in ``path``, with layers applied, `invoke scale` overrides and images bound."""
    raw = read_yaml(path)
    nodesets = raw.get("nodesets")
    if isinstance(nodesets, list):
        layers_dir = path.parent / str(raw.get("layers", "layers"))
        layers = Layers(path, nodesets, layers_dir)
        raw["nodesets"] = [layers.resolve(i, ns) for i, ns in enumerate(nodesets)]
    name = raw.get("name")
    if isinstance(name, str) and isinstance(raw.get("nodesets"), list):
        scale = read_scale(name)
        for ns in raw["nodesets"]:
            if isinstance(ns, dict) and ns.get("name") in scale:
                ns["replicas"] = scale[ns["name"]]
    spec = validate(ClusterSpec, raw, path)
    _check_references(path, spec)
    cell, images, hint = _bind_images(path, spec, config)
    return Cluster(spec, path, cell, images, hint)


def read_scale(cluster_name: str) -> dict[str, int]:
    file = state_dir(cluster_name) / "replicas.json"
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{file}: unreadable scale state ({exc}); delete it") from None
    return {str(k): v for k, v in data.items()}


def write_scale(cluster_name: str, replicas: dict[str, int]) -> None:
    file = state_dir(cluster_name) / "replicas.json"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(replicas, indent=2, sort_keys=True) + "\n")


def _check_references(path: Path, spec: ClusterSpec) -> None:
    names = [ns.name for ns in spec.nodesets]  # unique: Layers refuses duplicates first
    taken = {CONTROLLER, LOGIN}
    for i, name in enumerate(names):
        if name in taken:
            raise ConfigError(f"{path}: nodesets[{i}].name: {name!r} is reserved")
    seen: set[str] = set()
    for i, part in enumerate(spec.partitions):
        if part.name in seen:
            raise ConfigError(f"{path}: partitions[{i}].name: duplicate partition {part.name!r}")
        seen.add(part.name)
        for j, ns in enumerate(part.nodesets):
            if ns not in names:
                raise ConfigError(
                    f"{path}: {format_path(('partitions', i, 'nodesets', j))}: unknown node set "
                    f"{ns!r}; expected one of {', '.join(names)}"
                )
    for i, ns in enumerate(spec.nodesets):
        for gres in ns.gres:
            name, *_, count = gres.split(":")
            if name == "gpu" and not (gres.count(":") in (1, 2) and count.isdigit()):
                raise ConfigError(
                    f"{path}: nodesets[{i}].gres: {gres!r}: expected gpu[:type]:count"
                )
    if sum(p.default for p in spec.partitions) > 1:
        raise ConfigError(f"{path}: partitions: more than one partition has default: true")


def _bind_images(
    path: Path, spec: ClusterSpec, config: Config
) -> tuple[matrix.Cell, dict[str, str], str]:
    set_name = spec.images.set
    if set_name not in config.versions.sets:
        raise ConfigError(
            f"{path}: images.set: unknown set {set_name!r} in {config.path}; "
            f"expected one of {', '.join(sorted(config.versions.sets))}"
        )
    cells = {c.name: c for c in matrix.cells_of(config, set_name)}
    if spec.images.cell is None:
        if len(cells) != 1:
            raise ConfigError(
                f"{path}: images.cell: set {set_name!r} has {len(cells)} cells; name one of "
                f"{', '.join(sorted(cells))}"
            )
        cell = next(iter(cells.values()))
    elif spec.images.cell in cells:
        cell = cells[spec.images.cell]
    else:
        raise ConfigError(
            f"{path}: images.cell: set {set_name!r} has no cell {spec.images.cell!r}; "
            f"expected one of {', '.join(sorted(cells))}"
        )
    targets = matrix.expand(config, set_name, [cell])
    refs = {t.component: t.ref for t in targets if matrix.COMPONENTS[t.component].public}
    for i, ns in enumerate(spec.nodesets):
        if ns.image not in refs or ns.image in (CONTROLLER, LOGIN, JAIL):
            usable = sorted(set(refs) - {CONTROLLER, LOGIN, JAIL})
            raise ConfigError(
                f"{path}: nodesets[{i}].image: no {ns.image!r} node image for cell {cell.name} "
                f"of set {set_name!r}; expected one of {', '.join(usable)}"
            )
    wanted = {CONTROLLER, LOGIN, JAIL, *(ns.image for ns in spec.nodesets)}
    hint = f"invoke build --set {set_name} --cell {cell.name}"
    return cell, {c: refs[c] for c in sorted(wanted)}, hint


def as_dict(cluster: Cluster) -> dict[str, Any]:
    """The resolved model as plain data (written next to the manifests for review)."""
    return {
        "cluster": cluster.spec.model_dump(),
        "cell": cluster.cell.name,
        "images": cluster.images,
    }
