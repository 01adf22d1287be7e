"""Binding a cluster file to the images of one build cell of versions.yaml (and, for node sets
of another arch, that arch's cell of the same set)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from slurmforge import features, matrix
from slurmforge.config import Config
from slurmforge.deploy import roles
from slurmforge.deploy.spec.model import ClusterSpec, image_key
from slurmforge.errors import ConfigError


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
