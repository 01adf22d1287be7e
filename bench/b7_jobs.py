"""B7: what the jail, the per-job /tmp and cgroups cost a job, on warm images.

One throwaway cluster from the shipped cluster file with three node sets of two nodes each, all
from the same images, one partition each:
- `main`: the shipped nodes (steps in the jail, a /tmp and /dev/shm per job);
- `tasktmp`: the jail as it was before jobs had their own /tmp (a fresh tmpfs per task), for the
  per-job /tmp's own cost;
- `sharedpid`: the jail as it was before each step had a PID namespace of its own (and its stdio
  files checked), for that namespace's own cost;
- `bare`: no jail at all (the plugin switched off on those nodes), the baseline.
The switch is slurmd's environment (SLURMFORGE_JAIL, see jail/spank/slurmforge_jail.c), set
through the node sets' `env`.

A second throwaway cluster, the same but for `slurm.cgroups: false` (processes tracked through
/proc, nothing constrained: what every cluster ran before jobs were held to their resources),
with the shipped partition only, is measured after the first is gone, for the cost of cgroups.

Figures, each partition in turn, from a jail user on the login node:
- step launch latency: `srun -N2 true`, median of 20 (allocation, launch on both nodes, exit);
  target: jail <= 1.3 x bare;
- throughput: 200 `sbatch --wrap=true`, from the first submission until the queue is empty;
  targets: >= 10 jobs/s with the jail, per-job /tmp within 10% of the per-task one;
- cgroups on vs off (`main` of each cluster): launch <= 1.15 x, jobs/s >= 0.9 x;
- the step's PID namespace (`main` vs `sharedpid`): launch, a step inside an allocation, and
  jobs/s; targets <= 1.05 x and >= 0.95 x.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import docker
import yaml

from bench.common import ROOT, free_ports, invoke

JOBS = 200
LAUNCHES = 20
PARTITIONS = {"main": "cpu", "tasktmp": "tasktmp", "sharedpid": "sharedpid", "bare": "bare"}
MODES = {"tasktmp": "task-tmp", "sharedpid": "shared-pid", "bare": "off"}  # SLURMFORGE_JAIL


def cluster_file(root: Path, name: str, cgroups: bool = True) -> Path:
    data = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
    (shipped,) = data["nodesets"]
    partitions = PARTITIONS if cgroups else {"main": "cpu"}
    data.update(
        name=name,
        slurm={"cgroups": cgroups},
        nodesets=[
            shipped,
            *(
                {**shipped, "name": ns, "env": {"SLURMFORGE_JAIL": mode}}
                for ns, mode in MODES.items()
                if ns in partitions.values()
            ),
        ],
        partitions=[
            {"name": part, "nodesets": [ns], "default": part == "main"}
            for part, ns in partitions.items()
        ],
    )
    (root / "layers").symlink_to(ROOT / "deploy" / "layers")
    path = root / "cluster.yaml"
    path.write_text(yaml.safe_dump(free_ports(data)))
    return path


def measure(
    name: str, cgroups: bool
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Deploy, then per partition the median launch (ms) and the jobs/s, and for the step's PID
    namespace the median step in an allocation (ms); then take it down."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        path = cluster_file(root, name, cgroups)
        where = ["--cluster", str(path), "--out", str(root / "out")]
        parts = [p["name"] for p in yaml.safe_load(path.read_text())["partitions"]]
        try:
            invoke("deploy", *where)
            jail = in_jail(docker.from_env(), name)
            latency = {part: launch_ms(jail, f"-p {part} -N2") for part in parts}
            rate = {part: jobs_per_s(jail, part) for part in parts}
            steps = {p: step_ms(jail, f"-p {p} -N2") for p in ("main", "sharedpid") if p in parts}
        finally:
            invoke("down", "--volumes", *where)
    return latency, rate, steps


def main() -> None:
    latency, rate, steps = measure("sfbench7", cgroups=True)
    plain_latency, plain_rate, _ = measure("sfbench7n", cgroups=False)
    print(f"srun -N2 true, median of {LAUNCHES}:")
    for part, ms in latency.items():
        print(f"  {part:8} {ms:6.0f} ms  ratio to bare {ms / latency['bare']:.2f}")
    print("  (target: main <= 1.3 x bare)")
    print(f"{JOBS} x sbatch --wrap=true, submission to empty queue:")
    for part, per_s in rate.items():
        print(f"  {part:8} {per_s:6.1f} jobs/s  ratio to bare {per_s / rate['bare']:.2f}")
    print(
        f"  per-job /tmp vs per-task tmpfs: {rate['main'] / rate['tasktmp']:.2f} "
        "(target >= 0.90); target main >= 10 jobs/s"
    )
    print("the step's PID namespace (main vs sharedpid, in the same cluster):")
    print(
        f"  launch {latency['main']:.0f} vs {latency['sharedpid']:.0f} ms: "
        f"{latency['main'] / latency['sharedpid']:.2f} x; step in an allocation "
        f"{steps['main']:.0f} vs {steps['sharedpid']:.0f} ms: "
        f"{steps['main'] / steps['sharedpid']:.2f} x (targets <= 1.05)"
    )
    print(
        f"  {rate['main']:.1f} vs {rate['sharedpid']:.1f} jobs/s: "
        f"{rate['main'] / rate['sharedpid']:.2f} x (target >= 0.95)"
    )
    print("cgroups (main, cluster with slurm.cgroups true vs false):")
    print(
        f"  launch {latency['main']:.0f} vs {plain_latency['main']:.0f} ms: "
        f"{latency['main'] / plain_latency['main']:.2f} x (target <= 1.15)"
    )
    print(
        f"  {rate['main']:.1f} vs {plain_rate['main']:.1f} jobs/s: "
        f"{rate['main'] / plain_rate['main']:.2f} x (target >= 0.90)"
    )


def in_jail(client: docker.DockerClient, name: str):
    labels = [f"com.docker.compose.project={name}", "com.docker.compose.service=login"]
    (login,) = client.containers.list(filters={"label": labels})
    login.exec_run(["chroot", "/jail", "createuser", "--non-interactive", "bench"])

    def run(cmd: str) -> str:
        code, out = login.exec_run(["chroot", "/jail", "su", "-", "bench", "-c", cmd])
        if code:
            raise subprocess.CalledProcessError(code, cmd, out)
        return out.decode().strip()

    return run


def launch_ms(jail, where: str) -> float:
    """Median ms of `srun -Q WHERE true` (WHERE: which nodes, e.g. -p main -N2)."""
    jail(f"srun -Q {where} true")  # warm: the first step on a node loads its plugins
    out = jail(
        f"for i in $(seq {LAUNCHES}); do s=$(date +%s%N); srun -Q {where} true;"
        " echo $(( $(date +%s%N) - s )); done"
    )
    return statistics.median(int(ns) for ns in out.split()) / 1e6


def step_ms(jail, where: str) -> float:
    """Median ms of `srun -Q true` inside one allocation (`salloc WHERE`): a step of a job that
    already runs, as in a batch script, with no job to start or end per launch."""
    out = jail(
        f"salloc -Q {where} bash -c 'srun -Q true; for i in $(seq {LAUNCHES}); do "
        "s=$(date +%s%N); srun -Q true; echo $(( $(date +%s%N) - s )); done'"
    )
    return statistics.median(int(ns) for ns in out.split()) / 1e6


def jobs_per_s(jail, part: str, user: str = "bench") -> float:
    start = time.perf_counter()
    jail(f"for i in $(seq {JOBS}); do sbatch -Q -p {part} -o /dev/null --wrap=true; done")
    while jail(f"squeue -h -u {user} | wc -l") != "0":
        time.sleep(0.2)
    return JOBS / (time.perf_counter() - start)


if __name__ == "__main__":
    main()
