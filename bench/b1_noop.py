"""B1: warm no-op `invoke build --set default` vs warm-cache `docker build` of the same Dockerfiles.

Both run here, now, against the same daemon and the same (already built) images. The baseline
sends each rendered Dockerfile with its real build context to the classic builder, which then
finds every step in its layer cache; slurmforge instead decides from image labels alone.

Then README's own no-op, `.venv/bin/invoke build` (the launcher, slurmforge/launch.py), against
`python -c pass` (the interpreter's start alone) and against the same build through invoke
(`python -m invoke build`, which the launcher hands every other command line to), all in turn.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, built, invoke
from slurmforge.app import Project, Selection
from slurmforge.render import Rendered

RUNS = 5
LAUNCH_RUNS = 11


def docker_build_all(project: Project) -> float:
    """Seconds for `docker build` (classic builder, warm cache) of every Dockerfile target."""
    total = 0.0
    for target in project.targets:
        rendered = project.rendered(target)
        if not isinstance(rendered, Rendered):
            continue  # no Dockerfile: the base is imported from mmdebstrap
        with tempfile.TemporaryFile() as ctx:
            rendered.write_context(ctx)
            ctx.seek(0)
            start = time.perf_counter()
            subprocess.run(
                ["docker", "build", "-q", "-t", "slurmforge-bench/b1:tmp", "-"],
                stdin=ctx,
                check=True,
                stdout=subprocess.DEVNULL,
                env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/local/bin:/usr/bin:/bin"},
            )
            total += time.perf_counter() - start
    subprocess.run(
        ["docker", "rmi", "slurmforge-bench/b1:tmp"],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return total


def _seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def launcher() -> None:
    """README's no-op `invoke build` against python's start and against invoke's own path."""
    script = str(Path(sys.executable).parent / "invoke")
    runs: dict[str, list[float]] = {"launcher": [], "python": [], "invoke": []}
    for _ in range(LAUNCH_RUNS):  # in turn, so that a drift of the machine hits all three
        runs["launcher"].append(_seconds([script, "build"]))
        runs["python"].append(_seconds([sys.executable, "-c", "pass"]))
        runs["invoke"].append(_seconds([sys.executable, "-m", "invoke", "build"]))
    ours, python, through = (statistics.median(runs[k]) for k in ("launcher", "python", "invoke"))
    print(f"B1 README's no-op `invoke build`: {ours:.3f} s (median of {LAUNCH_RUNS}; target < 0.2)")
    print(f"B1 baseline `python -c pass`: {python:.3f} s; ratio {ours / python:.2f}")
    print(f"B1 the same build through invoke: {through:.3f} s; ratio {ours / through:.2f}")


def main() -> None:
    invoke("build", "--set", "default")  # make sure everything exists (no-op when it does)
    noop = [invoke("build", "--set", "default") for _ in range(RUNS)]
    assert built() == [], f"a no-op build rebuilt {built()}"
    full = []
    for _ in range(RUNS):  # without the stamp: render, hash and inspect every target
        shutil.rmtree(ROOT / ".cache/state", ignore_errors=True)
        full.append(invoke("build", "--set", "default"))
    assert built() == [], f"a no-op build rebuilt {built()}"
    project = Project(Selection(ROOT / "versions.yaml", "default"))
    baseline = [docker_build_all(project) for _ in range(3)]
    ours, theirs = statistics.median(noop), statistics.median(baseline)
    n = sum(isinstance(project.rendered(t), Rendered) for t in project.targets)
    print(
        f"B1 no-op `invoke build --set default`: {ours:.2f} s (median of {RUNS}: "
        f"{', '.join(f'{x:.2f}' for x in noop)})"
    )
    print(
        f"B1 baseline: warm-cache `docker build` of the same {n} Dockerfiles: {theirs:.2f} s "
        f"(median of 3)"
    )
    print(f"B1 ratio: {ours / theirs:.3f} (target <= 0.1 and < 2 s)")
    slow = statistics.median(full)
    print(
        f"B1 full path (stamp removed first; renders, hashes, inspects every target): "
        f"{slow:.2f} s (median of {RUNS}), ratio {slow / theirs:.3f}"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--launcher"]:  # this part alone: `python -m bench.b1_noop --launcher`
        launcher()
    else:
        main()
        launcher()
