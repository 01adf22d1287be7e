"""B24: what a cluster costs as it grows. The shipped cluster with its one node set at N nodes,
N = 2, 16 and 64 on the local target and N = 2, 16 and 48 node pods on Kubernetes (the lab's one
kubelet takes 110 pods; its 2 CPUs schedule about 6 node pods beside the cluster's other pods at
kubernetes.overcommit's request of 100m each, so on the lab give --k8s-sizes 2,4), each deployed
anew and measured in the same run:

- deploy: `invoke deploy` of the new cluster until every node is idle (the jail populated too);
- memory at rest: what the cluster's containers hold once idle, per node and in all (Docker's
  account, without the page cache it may drop; the lab's kubelet runs on the same engine);
- srun: `srun -N N hostname` as a user, the median of 3;
- jobs/s: 200 trivial `sbatch --wrap true` jobs, from the first submission to an empty queue;
- status: `invoke status`, the median of 3; backup: `invoke backup`; redeploy: `invoke deploy`
  with nothing changed.

Each figure is printed for every N, with its ratio to N = 2 (the baseline, measured in this run)
and its slope per added node.

    python -m bench.b24_scale [--sizes 2,16,64] [--k8s-sizes 2,16,48] [--only local|k8s]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.b8_k8s import INVOKE, cluster_file
from bench.common import ROOT, invoke
from tests.k8s import lab

JOBS = 200
USER = "bench"
Sh = Callable[[str, str], str]  # (service, command) -> its output
UNITS = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "kB": 1e3 / 2**20,
         "MB": 1e6 / 2**20, "GB": 1e9 / 2**20}  # fmt: skip


def sized_file(root: Path, name: str, nodes: int) -> Path:
    """The shipped cluster file with its node set at ``nodes``, its ports free here."""
    path = cluster_file(root, name)
    data = yaml.safe_load(path.read_text())
    (nodeset,) = data["nodesets"]
    nodeset["replicas"] = nodes
    path.write_text(yaml.safe_dump(data))
    return path


def memory_mib(names: list[str]) -> dict[str, float]:
    """MiB each named container holds now, from one `docker stats` for all of them."""
    if not names:
        return {}
    argv = ["docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}", *names]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    held = {}
    for line in out.splitlines():
        name, usage = line.split(" ", 1)
        number, unit = re.match(r"([0-9.]+)\s*([A-Za-z]+)", usage).groups()
        held[name] = float(number) * UNITS[unit]
    return held


def median_seconds(run: Callable[[], object], times: int = 3) -> float:
    took = []
    for _ in range(times):
        start = time.perf_counter()
        run()
        took.append(time.perf_counter() - start)
    return statistics.median(took)


def slurm_figures(sh: Sh, nodes: int) -> dict[str, float]:
    """srun across every node, and the job rate of JOBS trivial jobs, as a user."""

    def user(command: str) -> str:
        return sh("login", f"chroot /jail su - {USER} -c {shlex.quote(command)}")

    sh("login", f"chroot /jail createuser --non-interactive {USER}")

    def srun() -> None:
        out = user(f"srun -N {nodes} hostname")
        assert len(out.split()) == nodes, out

    figures = {"srun": median_seconds(srun)}
    start = time.perf_counter()
    user(f"for i in $(seq {JOBS}); do sbatch -Q -o /dev/null --wrap true; done")
    while user("squeue -h -o %i | wc -l") != "0":
        time.sleep(0.2)
    figures["jobs/s"] = JOBS / (time.perf_counter() - start)
    return figures


def local(root: Path, nodes: int) -> dict[str, float]:
    name = f"sfbench24n{nodes}"
    path = sized_file(root, name, nodes)
    where = ["--cluster", str(path), "--out", str(root / "out")]
    os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")

    def sh(service: str, command: str) -> str:
        argv = ["docker", "exec", f"{name}_{service}_1", "bash", "-c", command]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    try:
        figures = {"deploy": invoke("deploy", *where)}
        time.sleep(10)  # the nodes settle after registering
        listed = subprocess.run(
            ["docker", "ps", "--filter", f"label=com.docker.compose.project={name}",
             "--format", "{{.Names}}"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        held = memory_mib(listed)
        node_mib = [mib for c, mib in held.items() if re.search(r"_cpu-[0-9]+_1$", c)]
        figures["MiB/node"] = statistics.mean(node_mib)
        figures["MiB all"] = sum(held.values())
        figures |= slurm_figures(sh, nodes)
        figures["status"] = median_seconds(lambda: invoke("status", *where))
        figures["backup"] = invoke("backup", "--cluster", str(path), "--out", str(root / "backups"))
        figures["redeploy"] = invoke("deploy", *where)
        return figures
    finally:
        invoke("down", "--volumes", *where)


def k8s(root: Path, nodes: int, env: dict[str, str]) -> dict[str, float]:
    name = f"sfbench24k{nodes}"
    manifest, _ = lab.volumes(root, name, {})
    subprocess.run([lab.KUBECTL, "apply", "-f", str(manifest)], env=env, check=True,
                   capture_output=True)  # fmt: skip
    path = sized_file(root, name, nodes)
    where = ["--target", "k8s", "--cluster", str(path), "--out", str(root / "out")]
    pods = {"slurmctld": "slurmctld-0", "login": "login-0"}

    def sh(service: str, command: str) -> str:
        argv = [lab.KUBECTL, "--namespace", name, "exec", pods[service], "-c", service,
                "--", "bash", "-c", command]  # fmt: skip
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    def run(*args: str) -> float:
        start = time.perf_counter()
        subprocess.run([*INVOKE, *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start

    try:
        figures = {"deploy": run("deploy", "--timeout", "900", *where)}
        time.sleep(10)
        listed = subprocess.run(
            ["docker", "ps", "--filter", f"label=io.kubernetes.pod.namespace={name}",
             "--format", "{{.Names}} {{.Label \"io.kubernetes.container.name\"}}"],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()  # fmt: skip
        containers = {line.split()[0]: line.split()[-1] for line in listed}
        held = memory_mib(list(containers))
        node_mib = [mib for c, mib in held.items() if containers[c] == "slurmd"]
        figures["MiB/node"] = statistics.mean(node_mib)
        figures["MiB all"] = sum(held.values())
        figures |= slurm_figures(sh, nodes)
        figures["status"] = median_seconds(lambda: run("status", *where))
        backup = ["--target", "k8s", "--cluster", str(path), "--out", str(root / "backups")]
        figures["backup"] = run("backup", *backup)
        figures["redeploy"] = run("deploy", "--timeout", "900", *where)
        return figures
    finally:
        subprocess.run([lab.KUBECTL, "delete", "namespace", name, "--wait=true"], env=env,
                       capture_output=True)  # fmt: skip


def table(target: str, by_size: dict[int, dict[str, float]]) -> None:
    """Each figure for every N, its ratio to the smallest N, and its slope per added node."""
    sizes = sorted(by_size)
    base, top = sizes[0], sizes[-1]
    print(f"\n{target}: N = {', '.join(map(str, sizes))} (baseline N = {base}, this run)")
    for key in by_size[base]:
        values = [by_size[n][key] for n in sizes]
        shown = "  ".join(f"{v:9.2f}" for v in values)
        ratio = values[-1] / values[0] if values[0] else float("nan")
        slope = (values[-1] - values[0]) / (top - base)
        print(f"  {key:9} {shown}   N={top}/N={base}: {ratio:5.2f}   per added node: {slope:+.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,16,64")
    parser.add_argument("--k8s-sizes", default="2,16,48")
    parser.add_argument("--only", choices=("local", "k8s"))
    args = parser.parse_args()
    results: dict[str, dict[int, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.only != "k8s":
            results["local"] = {}
            for n in map(int, args.sizes.split(",")):
                results["local"][n] = local(Path(tmp) / f"local{n}", n)
                print(f"local N={n}: {results['local'][n]}", file=sys.stderr, flush=True)
        if args.only != "local":
            results["k8s lab"] = {}
            env = lab.start()
            try:
                with lab.ApiForPods():
                    for n in map(int, args.k8s_sizes.split(",")):
                        results["k8s lab"][n] = k8s(Path(tmp) / f"k8s{n}", n, env)
                        print(f"k8s N={n}: {results['k8s lab'][n]}", file=sys.stderr, flush=True)
            finally:
                lab.recipe("down")
    for target, by_size in results.items():
        table(target, by_size)


if __name__ == "__main__":
    main()
