"""B26: what choosing a deploy target costs a command before it does anything, in CPU.

Every deploy-side task (`invoke deploy`, `status`, `backup`, `scale`, ...) goes through
slurmforge/deploy/commands.py to its target's class. Each run below is a fresh interpreter, as
each command is, and is measured in CPU-seconds (the machine's other load moves wall time more):

- ours: the local target chosen, as a command on a local cluster does now (neither the k8s
  target's modules nor ldap3 are imported: ldap3 only where a DN or filter is checked or a
  site's directory is bound to);
- baseline: the same with what every command imported before: the k8s target too, and ldap3
  (with the cluster-file schema and the directory probe);
- python: `python -c pass`, the interpreter's start alone.

The runs alternate, so a drift of the machine hits all three; medians are printed, and the
ratio of ours to the baseline.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys

from bench.common import ROOT

RUNS = 9
CHOOSE = (
    "from pathlib import Path\n"
    "from slurmforge.deploy.commands import target_class\n"
    "from slurmforge.deploy.target import Where\n"
    "target_class(Where(Path('cluster.yaml'), Path('versions.yaml'), Path('out')))\n"
)
PROGRAMS = {
    "ours": CHOOSE,
    "baseline": CHOOSE + "import slurmforge.deploy.k8s.run, ldap3, ldap3.operation.search\n",
    "python": "pass",
}


def cpu_seconds(program: str) -> float:
    """The CPU (user and system) of one fresh interpreter running ``program``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", program], cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    runs: dict[str, list[float]] = {name: [] for name in PROGRAMS}
    for _ in range(RUNS):
        for name, program in PROGRAMS.items():
            runs[name].append(cpu_seconds(program))
    ours, baseline, python = (statistics.median(runs[k]) for k in ("ours", "baseline", "python"))
    print(f"B26 a local command's choice of target: {ours:.3f} CPU-s (median of {RUNS})")
    ratio = ours / baseline
    print(f"B26 baseline, both targets and ldap3 imported: {baseline:.3f} CPU-s; ratio {ratio:.2f}")
    print(f"B26 the interpreter's start alone: {python:.3f} CPU-s")


if __name__ == "__main__":
    main()
