"""B21: a 2-node job on an elastic node set at zero against the same job on nodes that already
run, in the same run, on the local target and on the k8s lab; and what a stopped node gives back.

One cluster per target: the shipped one's two fixed nodes (partition main) and an elastic set
`burst` of up to two nodes (partition burst, idle 30 s). Timed from `sbatch -N2 --wrap 'srun
true'` on the login node until squeue shows the job RUNNING, ROUNDS times each: on main (fixed
nodes, the baseline) and on burst with both its nodes powered down (each round waits for them to
stop again). Then the memory and CPU an idle running node's container uses (Docker's own account
of it, which the lab's kubelet runs on the same engine), which a powered-down one gives back.
(B20 is `invoke plan`'s benchmark.)

    python -m bench.b21_elastic
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
import yaml

from bench.b8_k8s import INVOKE, cluster_file
from bench.common import ROOT, invoke, service_container
from tests.k8s import lab

ROUNDS = 3
NAME = "sfbench21"
Sh = Callable[[str, str], str]  # (service, command) → its output


def elastic_file(root: Path, name: str) -> Path:
    path = cluster_file(root, name)
    data = yaml.safe_load(path.read_text())
    data["nodesets"].append(
        {"name": "burst", "definitions": ["cpu-small"], "elastic": {"max": 2, "idle": 30}}
    )
    data["partitions"].append({"name": "burst", "nodesets": ["burst"]})
    data["metrics"]["enabled"] = False
    path.write_text(yaml.safe_dump(data))
    return path


def rounds(sh: Sh) -> tuple[list[float], list[float]]:
    """Seconds from sbatch to RUNNING: on running nodes, then on the elastic set at zero."""

    def user(command: str) -> str:
        return sh("login", f"chroot /jail su - bench -c {shlex.quote(command)}")

    def running_after(partition: str) -> float:
        start = time.perf_counter()
        job = user(f"sbatch --parsable -p {partition} -N2 -o /dev/null --wrap 'srun true'")
        while user(f"squeue -h -j {job} -o %T") not in ("RUNNING", "COMPLETING", ""):
            time.sleep(0.1)
        took = time.perf_counter() - start
        while user(f"squeue -h -j {job} -o %T"):
            time.sleep(0.5)
        return took

    def powered_down() -> None:
        deadline = time.monotonic() + 300
        while sh("slurmctld", "sinfo -h -p burst -o %t") != "idle~":
            assert time.monotonic() < deadline, "burst did not power down"
            time.sleep(2)

    sh("login", "chroot /jail createuser --non-interactive bench")
    fixed = [running_after("main") for _ in range(ROUNDS)]
    cold = []
    for _ in range(ROUNDS):
        powered_down()
        cold.append(running_after("burst"))
    return fixed, cold


def idle_node(container) -> tuple[float, str]:
    """MiB and CPU share an idle node's container holds (Docker's account)."""
    stats = container.stats(stream=False)
    memory = stats["memory_stats"]["usage"] - stats["memory_stats"].get("stats", {}).get(
        "inactive_file", 0
    )
    cpu = subprocess.run(
        ["docker", "stats", "--no-stream", "--format", "{{.CPUPerc}}", container.name],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return memory / 2**20, cpu


def local(root: Path) -> tuple[list[float], list[float], tuple[float, str]]:
    path = elastic_file(root, NAME)
    where = ["--cluster", str(path), "--out", str(root / "out")]
    os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
    client = docker.from_env()

    def sh(service: str, command: str) -> str:
        container = service_container(client, NAME, service)
        return container.exec_run(["bash", "-c", command]).output.decode().strip()

    try:
        invoke("deploy", *where)
        fixed, cold = rounds(sh)
        return fixed, cold, idle_node(service_container(client, NAME, "burst-0"))
    finally:
        invoke("down", "--volumes", *where)


def k8s(root: Path) -> tuple[list[float], list[float], tuple[float, str]]:
    name = f"{NAME}k"
    env = lab.start()
    try:
        manifest, _ = lab.volumes(root, name, {})
        subprocess.run([lab.KUBECTL, "apply", "-f", str(manifest)], env=env, check=True,
                       capture_output=True)  # fmt: skip
        path = elastic_file(root, name)
        where = ["--cluster", str(path), "--out", str(root / "out")]
        pods = {"slurmctld": "slurmctld-0", "login": "login-0"}

        def sh(service: str, command: str) -> str:
            argv = [lab.KUBECTL, "--namespace", name, "exec", pods[service], "-c", service,
                    "--", "bash", "-c", command]  # fmt: skip
            return subprocess.run(argv, env=env, capture_output=True, text=True).stdout.strip()

        with lab.ApiForPods():
            subprocess.run([*INVOKE, "deploy", "--target", "k8s", "--timeout", "300", *where],
                           cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            fixed, cold = rounds(sh)
            sh("slurmctld", "scontrol update nodename=burst-0 state=power_up")
            deadline = time.monotonic() + 300
            while sh("slurmctld", "sinfo -h -n burst-0 -o %t") != "idle":
                assert time.monotonic() < deadline, "burst-0 did not start"
                time.sleep(2)
            filters = {"label": ["io.kubernetes.container.name=slurmd",
                                 f"io.kubernetes.pod.namespace={name}"]}  # fmt: skip
            found = docker.from_env().containers.list(filters=filters)
            pod = "io.kubernetes.pod.name"
            (node,) = [c for c in found if c.labels[pod].startswith("burst-0-")]
            return fixed, cold, idle_node(node)
    finally:
        lab.recipe("down")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        figures = {"local": local(Path(tmp) / "local"), "k8s lab": k8s(Path(tmp) / "k8s")}
    for target, (fixed, cold, (memory, cpu)) in figures.items():
        base, elastic = statistics.median(fixed), statistics.median(cold)
        print(f"{target}: sbatch -N2 -> RUNNING on running nodes (baseline): median {base:.2f} s "
              f"{[round(t, 2) for t in fixed]}")  # fmt: skip
        print(f"{target}: sbatch -N2 -> RUNNING on an elastic set at zero: median {elastic:.2f} s "
              f"{[round(t, 2) for t in cold]}")  # fmt: skip
        print(f"{target}: elastic / running: {elastic / base:.1f}")
        print(f"{target}: an idle running node holds {memory:.0f} MiB and {cpu} CPU; stopped: none")


if __name__ == "__main__":
    main()
