"""B21: a 2-node job on an elastic node set at zero against the same job on nodes that already
run, in the same run, on the local target; and what a stopped node gives back.

One cluster: the shipped one's two fixed nodes (partition main) and an elastic set `burst` of
up to two nodes (partition burst, idle 30 s). Timed from `sbatch -N2 --wrap 'srun true'` on the
login node until squeue shows the job RUNNING, ROUNDS times each: on main (fixed nodes, the
baseline) and on burst with both its nodes powered down (each round waits for them to stop
again). Then the memory and CPU an idle running node container uses (Docker's own account of
it), which a powered-down one gives back. (B20 is `invoke plan`'s benchmark.)

    python -m bench.b21_elastic
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import docker
import yaml

from bench.b8_k8s import cluster_file
from bench.common import invoke, service_container

ROUNDS = 3
NAME = "sfbench21"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = cluster_file(root, NAME)
        data = yaml.safe_load(path.read_text())
        data["nodesets"].append(
            {"name": "burst", "definitions": ["cpu-small"], "elastic": {"max": 2, "idle": 30}}
        )
        data["partitions"].append({"name": "burst", "nodesets": ["burst"]})
        data["metrics"]["enabled"] = False
        path.write_text(yaml.safe_dump(data))
        where = ["--cluster", str(path), "--out", str(root / "out")]
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        client = docker.from_env()

        def container(service: str):
            return service_container(client, NAME, service)

        def sh(service: str, command: str) -> str:
            argv = ["bash", "-c", command]
            return container(service).exec_run(argv).output.decode().strip()

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

        try:
            invoke("deploy", *where)
            sh("login", "chroot /jail createuser --non-interactive bench")
            fixed = [running_after("main") for _ in range(ROUNDS)]
            cold = []
            for _ in range(ROUNDS):
                powered_down()
                cold.append(running_after("burst"))
            # an idle node that runs: what Docker accounts to it
            stats = container("burst-0").stats(stream=False)
            memory = stats["memory_stats"]["usage"] - stats["memory_stats"].get("stats", {}).get(
                "inactive_file", 0
            )
            cpu = subprocess.run(
                ["docker", "stats", "--no-stream", "--format", "{{.CPUPerc}}",
                 container("burst-0").name],
                capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
        finally:
            invoke("down", "--volumes", *where)
    base, elastic = statistics.median(fixed), statistics.median(cold)
    print(f"sbatch -N2 -> RUNNING on running nodes (baseline): median {base:.2f} s {fixed}")
    print(f"sbatch -N2 -> RUNNING on an elastic set at zero: median {elastic:.2f} s {cold}")
    print(f"elastic / running: {elastic / base:.1f}")
    print(f"an idle running node holds {memory / 2**20:.0f} MiB and {cpu} CPU; stopped: none")


if __name__ == "__main__":
    main()
