"""Matrix sets → cells → image targets, ordered as a DAG.

The components themselves are declared in components.py."""

from __future__ import annotations

import dataclasses
import graphlib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from slurmforge.components import COMPONENTS, Axis
from slurmforge.config import Config, MatrixSet
from slurmforge.errors import ConfigError
from slurmforge.inputs import format_path
from slurmforge.pins import NATIVE_ARCH

INTERNAL_REGISTRY = "slurmforge"


def arch_suffix(arch: str) -> str:
    """What another arch than the native one adds to a cell's name and an image's local tag."""
    return "" if arch == NATIVE_ARCH else f"-{arch}"


def slurm_at_least(slurm: str, series: tuple[int, int]) -> bool:
    """Whether Slurm ``slurm`` (e.g. 24.05.8) is of ``series`` (e.g. (24, 5)) or later."""
    major, minor = (int(x) for x in slurm.split(".")[:2])
    return (major, minor) >= series


@dataclass(frozen=True, order=True)
class Cell:
    distro: str
    slurm: str
    cuda: str
    arch: str = NATIVE_ARCH

    @property
    def name(self) -> str:
        return f"{self.slurm}-cuda{self.cuda}-{self.distro}{arch_suffix(self.arch)}"

    @property
    def slurm_series(self) -> str:
        return ".".join(self.slurm.split(".")[:2])

    def value(self, axis: Axis) -> str:
        return str(getattr(self, axis.value))


@dataclass(frozen=True)
class BuildTarget:
    """One image to build: a component of one cell (or of every cell that shares its axes)."""

    component: str
    coords: tuple[tuple[Axis, str], ...]
    parents: tuple[str, ...]  # target ids
    tags: tuple[str, ...]  # first one is where the image is looked up
    cells: tuple[Cell, ...] = field(compare=False)

    # computed once per target (a plan of thousands of cells asks each many times)
    @cached_property
    def id(self) -> str:
        return f"{self.component}/{'-'.join(v for _, v in self.coords)}"

    @cached_property
    def _axes(self) -> dict[Axis, str]:
        return dict(self.coords)

    @property
    def ref(self) -> str:
        return self.tags[0]

    def coord(self, axis: Axis) -> str | None:
        return self._axes.get(axis)

    @property
    def distro(self) -> str:  # every component has the distro axis
        return self._axes[Axis.DISTRO]

    @property
    def slurm(self) -> str | None:
        return self.coord(Axis.SLURM)

    @property
    def cuda(self) -> str | None:
        return self.coord(Axis.CUDA)

    @property
    def arch(self) -> str:
        return self.coord(Axis.ARCH) or NATIVE_ARCH

    @property
    def platform(self) -> str:
        """Where it is built and runs: a builder on the native arch, else its own arch's."""
        return f"linux/{NATIVE_ARCH if COMPONENTS[self.component].builder else self.arch}"


@dataclass
class _Draft:
    component: str
    coords: tuple[tuple[Axis, str], ...]
    parents: tuple[str, ...] = ()
    # ordered sets (a dict's keys): a base shared by hundreds of cells is met once per cell
    tags: dict[str, None] = field(default_factory=dict)
    cells: dict[Cell, None] = field(default_factory=dict)


def cells_of(config: Config, set_name: str) -> list[Cell]:
    v = config.versions
    if set_name not in v.sets:
        raise ConfigError(
            f"unknown matrix set {set_name!r}; expected one of {', '.join(sorted(v.sets))}",
            hint=f"sets are defined under 'sets:' in {config.path}",
        )
    mset = v.sets[set_name]
    cells: list[Cell] = []
    if mset.matrix is not None:
        m = mset.matrix
        axes = itertools.product(m.distro, m.slurm, m.cuda, m.arch)
        cells = [Cell(d, s, c, a) for d, s, c, a in axes]
    for i, spec in enumerate(mset.include):
        cell = Cell(spec.distro, spec.slurm, spec.cuda, spec.arch)
        if cell in cells:
            loc = format_path(("sets", set_name, "include", i))
            raise ConfigError(f"{config.path}: {loc}: duplicate cell {cell.name}")
        cells.append(cell)
    return cells


def select_cells(cells: Sequence[Cell], names: Iterable[str], set_name: str) -> list[Cell]:
    names = list(names)
    if not names:
        return list(cells)
    by_name = {c.name: c for c in cells}
    for name in names:
        if name not in by_name:
            raise ConfigError(
                f"--cell {name!r} is not in set {set_name!r}; "
                f"expected one of {', '.join(sorted(by_name))}"
            )
    return [by_name[n] for n in dict.fromkeys(names)]


def tag_values(component: str, cell: Cell) -> dict[str, str]:
    return {
        "component": component,
        "slurm": cell.slurm,
        "slurm_series": cell.slurm_series,
        "cuda": cell.cuda,
        "distro": cell.distro,
        "arch": cell.arch,
    }


def published_tags(mset: MatrixSet, component: str, cell: Cell) -> list[str]:
    """The tags a push publishes for ``cell``'s ``component``: one manifest list each, shared
    by the cell's siblings of every arch."""
    values = tag_values(component, cell)
    return [f"{mset.registry}/{component}:{t.format(**values)}" for t in mset.tags]


def tags_for(mset: MatrixSet, component: str, cell: Cell) -> list[str]:
    """The image's local tags: the published ones, with -<arch> unless the arch is native (one
    local tag holds one arch's image; the list that joins them exists only in a registry)."""
    suffix = arch_suffix(cell.arch)
    return [f"{tag}{suffix}" for tag in published_tags(mset, component, cell)]


def expand(
    config: Config, set_name: str, cells: Sequence[Cell], components: Iterable[str] = ()
) -> list[BuildTarget]:
    """Targets for ``cells`` in dependency order; ``components`` limits to those + parents."""
    mset = config.versions.sets[set_name]
    wanted = list(components)
    for name in wanted:
        if name not in COMPONENTS:
            public = sorted(n for n, c in COMPONENTS.items() if c.public)
            raise ConfigError(
                f"--component {name!r}: unknown component; expected one of {', '.join(public)}"
            )
    wanted = wanted or list(COMPONENTS)
    drafts: dict[str, _Draft] = {}
    visited: dict[tuple[str, Cell], str] = {}  # a (component, cell) and its parents, once

    def visit(component: str, cell: Cell) -> str:
        if (component, cell) in visited:  # its parents and tags are there already
            return visited[component, cell]
        comp = COMPONENTS[component]
        coords = tuple((a, cell.value(a)) for a in comp.axes)
        if cell.arch != NATIVE_ARCH:
            coords += ((Axis.ARCH, cell.arch),)
        target_id = f"{component}/{'-'.join(v for _, v in coords)}"
        draft = drafts.setdefault(target_id, _Draft(component, coords))
        native = dataclasses.replace(cell, arch=NATIVE_ARCH)
        draft.parents = tuple(visit(p, native if comp.builder else cell) for p in comp.parents)
        draft.cells[cell] = None
        if comp.public:
            tags = tags_for(mset, component, cell)
        else:
            tags = [f"{INTERNAL_REGISTRY}/{target_id.replace('/', ':', 1)}"]
        draft.tags.update(dict.fromkeys(tags))
        visited[component, cell] = target_id
        return target_id

    for cell in cells:
        for component in wanted:
            visit(component, cell)
    targets = {
        i: BuildTarget(d.component, d.coords, d.parents, tuple(d.tags), tuple(d.cells))
        for i, d in drafts.items()
    }
    return [targets[i] for i in order(targets.values())]


def order(targets: Iterable[BuildTarget]) -> list[str]:
    graph = {t.id: set(t.parents) for t in targets}
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise ConfigError(f"component graph has a cycle: {' → '.join(exc.args[1])}") from None
