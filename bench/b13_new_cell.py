"""B13: cold build of one new cell of the `current` set (Slurm 26.05.3, CUDA 12.2.2): total wall
time against its slurm-debs target (the Slurm compile) in the same run, the ratio the issue sets
at <= 1.5; then the same Slurm with the second CUDA value (12.9.1): which targets it reuses and
which it builds.

Removes the images of every target that belongs to Slurm 26.05.3 (so its compile and everything
above it start from nothing) and keeps what other cells share (the Debian base, the database
image, the enroot stage that 25.11.7 also builds), as when a site adds one Slurm to a matrix it
already builds. Takes about one Slurm compile and a few minutes.
"""

from __future__ import annotations

from bench.common import invoke, summary
from slurmforge.app import Project, Selection
from slurmforge.engine import Engine
from tests.common import ROOT

SET = "current"
FIRST, SECOND = "26.05.3-cuda12.2.2-debian12", "26.05.3-cuda12.9.1-debian12"


def _drop(slurm: str) -> int:
    """Remove every tag of the targets built for ``slurm``; how many images went."""
    engine = Engine.connect()
    project = Project(Selection(ROOT / "versions.yaml", SET))
    removed = 0
    for target in project.targets:
        if target.slurm == slurm:
            removed += sum(engine.remove(tag) for tag in (target.ref, *target.tags))
    # and the untagged images of earlier builds of that Slurm, whose layers the builder would
    # otherwise find again (their parents go with them where nothing else uses them)
    label = f"io.slurmforge.slurm={slurm}"
    pruned = engine.api.prune_images(filters={"dangling": True, "label": label})
    return removed + len(pruned.get("ImagesDeleted") or [])


def _rows() -> list[dict[str, object]]:
    rows = summary()
    for r in rows:
        print(f"  {r['target']:<34} {r['status']:<7} {float(r['seconds']):>7.1f} s")
    return rows


def main() -> None:
    print(f"B13 removed {_drop('26.05.3')} images of Slurm 26.05.3")
    total = invoke("build", "--set", SET, "--cell", FIRST, quiet=False)
    print(f"B13 {FIRST}, cold:")
    rows = _rows()
    first_ids = {str(r["target"]) for r in rows}
    debs = next(float(r["seconds"]) for r in rows if str(r["target"]).startswith("slurm-debs/"))
    print(f"B13 total wall: {total:.1f} s; slurm-debs (compile) target: {debs:.1f} s")
    print(f"B13 ratio total / slurm-debs: {total / debs:.2f} (target <= 1.5)")

    second = invoke("build", "--set", SET, "--cell", SECOND, quiet=False)
    print(f"B13 {SECOND} (the same Slurm, the second CUDA value), wall {second:.1f} s:")
    rows = _rows()
    reused = [str(r["target"]) for r in rows if r["status"] == "cached"]
    built = [str(r["target"]) for r in rows if r["status"] == "built"]
    # a CUDA-independent target of the first cell "built" again only takes the new cell's tags
    tagged = [t for t in built if t in first_ids]
    print(f"B13 second CUDA reuses {len(reused)}: {', '.join(reused)}")
    print(f"B13 second CUDA re-tags {len(tagged)} (the same images): {', '.join(tagged)}")
    new = [t for t in built if t not in first_ids]
    print(f"B13 second CUDA builds {len(new)}: {', '.join(new)}")
    print(f"B13 ratio second CUDA / first cell: {second / total:.2f}")


if __name__ == "__main__":
    main()
