"""Reading a cluster file: its node sets' layers applied, node counts overridden, the schema
validated (spec/), the checks across its parts run (spec/checks.py, with the role names a node
set may not take), and its images bound to one build cell of versions.yaml (and, for node sets
of another arch, that arch's cell of the same set). Reads the cluster file and what it names,
nothing else: the caller gives the node counts `invoke scale` kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from slurmforge import features, matrix
from slurmforge.config import Config
from slurmforge.deploy import roles
from slurmforge.deploy.spec import checks
from slurmforge.deploy.spec import layers as spec_layers
from slurmforge.deploy.spec.model import Cluster, ClusterSpec, image_key
from slurmforge.errors import ConfigError
from slurmforge.inputs import read_yaml, validate

Scale = Callable[[str], Mapping[str, int]]  # the cluster's name → node set → node count


def no_scale(name: str) -> Mapping[str, int]:
    return {}


def load(path: Path, config: Config, scale: Scale | Mapping[str, int] = no_scale) -> Cluster:
    """The cluster in ``path``, with layers applied, node counts from ``scale`` (a mapping, or a
    function of the cluster's name giving one) over the file's, and images bound."""
    raw = read_yaml(path)
    layers = spec_layers.apply(path, raw)
    name = raw.get("name")
    if isinstance(name, str) and isinstance(raw.get("nodesets"), list):
        counts = scale if isinstance(scale, Mapping) else scale(name)
        for ns in raw["nodesets"]:
            named = isinstance(ns, dict) and isinstance(ns.get("name"), str)
            # an elastic set's size is its elastic.max
            if named and ns["name"] in counts and "elastic" not in ns:
                ns["replicas"] = counts[ns["name"]]
    spec = validate(ClusterSpec, raw, path, blame=layers.blame if layers else None)
    checks.check(path, spec, reserved=(roles.CONTROLLER, roles.LOGIN))
    cell, images, hint = bind_images(path, spec, config)
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


def bind_images(
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
        if ns.image not in usable_nodes(refs):
            usable = usable_nodes(refs)
            raise ConfigError(
                f"{path}: nodesets[{i}].image: no {ns.image!r} node image for cell {cell.name} "
                f"of set {set_name!r}; expected one of {', '.join(usable)}"
            )
        if ns.gpus and "cuda" not in features.carried_by(ns.image):
            gpu_images = sorted(c for c in usable_nodes(refs) if "cuda" in features.carried_by(c))
            raise ConfigError(
                f"{path}: nodesets[{i}].image: node set {ns.name!r} requests GPUs "
                f"({', '.join(ns.gres)}) but {ns.image!r} has no GPU user space; expected "
                f"{' or '.join(gpu_images)}"
            )
    images = {c: refs[c] for c in sorted(roles.images(spec))}
    cells_built = [cell]
    for i, ns in enumerate(spec.nodesets):
        if ns.arch is None or ns.arch == cell.arch:
            continue
        sibling = dataclasses.replace(cell, arch=ns.arch)
        if sibling.name not in cells:
            raise ConfigError(
                f"{path}: nodesets[{i}].arch: set {set_name!r} has no {ns.arch} cell of Slurm "
                f"{cell.slurm}, CUDA {cell.cuda} on {cell.distro} (expected {cell.arch}, or "
                f"{ns.arch} in the set's matrix.arch)"
            )
        if sibling not in cells_built:
            cells_built.append(sibling)
        images.update(
            {
                image_key(t.component, ns.arch, cell.arch): t.ref
                for t in matrix.expand(config, set_name, [sibling], [ns.image, roles.JAIL])
                if t.component in (ns.image, roles.JAIL)
            }
        )
    cell_args = " ".join(f"--cell {c.name}" for c in cells_built)
    hint = f"invoke build --set {set_name} {cell_args}"
    return cell, images, hint


def usable_nodes(refs: dict[str, str]) -> list[str]:
    """The public components a node set may run (not the controller, login, jail, …)."""
    return sorted(set(refs) - roles.SERVICE_IMAGES)
