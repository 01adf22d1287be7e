"""B20: `invoke plan` of a set of 1,000 cells vs the default set's one cell, in the same run.

The big set is the shipped versions.yaml with 10 distros (copies of debian12), 10 Slurm
releases (copies of 24.05.8), 5 CUDA lines (copies of 12.9.1) and both arches: 1,000 cells,
about 3,700 targets. The plan reads every target's inputs and what the engine holds for it, and
prints the same table either way; the figures are its wall time, median of RUNS each, and their
ratio. Before the cache of component files, the engine's one listing and the expansion's memo,
this plan took 7.5 s on an idle machine (issue 45, item 8); before the daemon's listing ran
beside the rendering, and a target whose parent is to be rebuilt was left unrendered, 3.4 s.
Only the default cell's images exist here, so most of the big set's targets wait on a parent:
a set whose every image exists renders all of them (about 2.2 s on the same machine).
"""

from __future__ import annotations

import copy
import statistics
import tempfile
from pathlib import Path

import yaml

from bench.common import ROOT, copy_project, invoke

RUNS = 3


def big_versions(path: Path) -> int:
    """Write the 1,000-cell versions file; its cell count."""
    data = yaml.safe_load((ROOT / "versions.yaml").read_text())
    distros = ["debian12", *(f"debian{20 + i}" for i in range(9))]
    slurms = ["24.05.8", *(f"24.05.{20 + i}" for i in range(9))]
    cudas = ["12.9.1", *(f"12.9.{20 + i}" for i in range(4))]
    for names, table, model in ((distros, "distros", "debian12"), (slurms, "slurm", "24.05.8"),
                                (cudas, "cuda", "12.9.1")):  # fmt: skip
        for name in names[1:]:
            data[table][name] = copy.deepcopy(data[table][model])
    arches = ["amd64", "arm64"]
    data["sets"]["big"] = {
        "registry": "127.0.0.1:5000/slurmforge",
        "tags": ["{slurm}-cuda{cuda}-{distro}"],
        "matrix": {"distro": distros, "slurm": slurms, "cuda": cudas, "arch": arches},
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return len(distros) * len(slurms) * len(cudas) * len(arches)


def median_plan(root: Path, set_name: str) -> float:
    return statistics.median(invoke("plan", "--set", set_name, root=root) for _ in range(RUNS))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = copy_project(Path(tmp))
        cells = big_versions(root / "versions.yaml")
        one = median_plan(root, "default")
        big = median_plan(root, "big")
    print(f"B20 plan of {cells} cells: {big:.2f} s; of the default set's 1 cell: {one:.2f} s")
    print(f"B20 ratio: {big / one:.1f}x the one-cell plan ({big / cells * 1000:.2f} ms per cell)")


if __name__ == "__main__":
    main()
