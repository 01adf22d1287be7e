"""The tools the images carry besides Slurm, declared once: add a new one here.

Each row says where the tool comes from in versions.yaml, which components' build contexts
take its sources, which components' images carry it (the ``io.slurmforge.features`` label),
what else its build needs, and whether a build may go without it.

A new tool is one row here, its key under ``tools:`` in versions.yaml, and its stanza in the
templates of the components that build it, guarded by ``{% if "<name>" in features %}`` when it
is optional. Everything else follows from the row: the typed ``tools:`` model (config.py), the
build-context needs (context.py), what a build lacks when an optional tool cannot be fetched
(``Result.lacking``, the ``io.slurmforge.skipped`` label) and what `invoke fetch` downloads.

Standard library only: config.py builds its ``tools:`` model from this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Origin(StrEnum):
    SOURCES = "sources"  # tools.<name>: compiled from 'sources' (or a 'releases' pick)
    USERSPACE = "userspace"  # tools.<name>: unpacked from 'userspace' (wheels, debs or apt)
    CUDA = "cuda"  # the cell's cuda.<version>.runtime (the CUDA axis; not under tools:)


@dataclass(frozen=True)
class Feature:
    name: str
    origin: Origin
    built_in: tuple[str, ...]  # components whose build context takes its sources
    carried_by: tuple[str, ...]  # components whose image has it
    # other upstream sources its build needs; 'cuda-build' is the cell's cuda.<version>.build
    needs: tuple[str, ...] = ()
    optional: bool = False  # a build may go without it, and says so (io.slurmforge.skipped)
    debs: tuple[str, ...] = ()  # its packages in slurm-debs, installed where it is carried
    # the axis whose versions.yaml entry picks its release when it has several (under
    # slurm.<version>.tools or cuda.<version>.tools): what it is built against
    axis: Literal["slurm", "cuda"] = "slurm"

    @property
    def key(self) -> str:
        """Where versions.yaml declares it."""
        return "cuda" if self.origin is Origin.CUDA else f"tools.{self.name}"


_DEBS = ("slurm-debs",)
_GPU = ("worker", "jail")
_CONTAINERS = ("slurmd", "worker", "jail")

FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature("cuda", Origin.CUDA, built_in=_GPU, carried_by=_GPU),
        Feature("nccl", Origin.USERSPACE, built_in=_GPU, carried_by=_GPU, axis="cuda"),
        # compiled with the cell's CUDA compiler, which no image ships, in a builder of its own
        Feature(
            "nccl-tests",
            Origin.SOURCES,
            ("nccl-tests",),
            _GPU,
            needs=("cuda-build",),
            axis="cuda",
        ),
        # compiled against each Slurm's own spank.h, in the same builder as Slurm; the portal's
        # sbatch loads the cluster's SPANK plugins as every client does
        Feature(
            "pyxis",
            Origin.SOURCES,
            ("slurm-debs",),
            (*_CONTAINERS, "portal"),
            debs=("slurmforge-pyxis",),
        ),
        Feature(
            "enroot", Origin.SOURCES, ("slurm-debs",), _CONTAINERS, debs=("enroot", "enroot+caps")
        ),
        # NVML's Python bindings, for the exporter's GPU collector (a pure-Python wheel)
        Feature("nvidia-ml-py", Origin.USERSPACE, ("exporter",), ("exporter",)),
        # the web portal: JupyterLab and the notebook server's side of JupyterHub and
        # batchspawner in the jail (servers run as jobs inside it; its venv is made in an image
        # of its own), the hub in its own image
        Feature("jupyterlab", Origin.USERSPACE, ("jupyter",), ("jail",)),
        Feature("jupyterhub", Origin.USERSPACE, ("portal",), ("portal",)),
    )
}


def tools() -> dict[str, Feature]:
    """The features declared under versions.yaml's ``tools:``."""
    return {n: f for n, f in FEATURES.items() if f.origin is not Origin.CUDA}


def built_in(component: str) -> list[Feature]:
    return [f for f in FEATURES.values() if component in f.built_in]


def carried_by(component: str) -> tuple[str, ...]:
    """The features an image of ``component`` has when nothing was skipped, sorted."""
    return tuple(sorted(n for n, f in FEATURES.items() if component in f.carried_by))
