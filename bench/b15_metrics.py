"""B15: one scrape of the exporter against what an operator runs by hand (`sinfo` and
`squeue`), on the shipped cluster (accounting on) at 2 nodes and at 64 (62 more created as
dynamic nodes that no slurmd answers for: slurmctld holds and reports them as it would real
ones): wall time per scrape, and the RPCs slurmctld served for it, read from `sdiag --json`
(its RPC counts by user: the exporter runs as its own account, the commands by hand as root).
Once on the shipped images (the scheduler's statistics from sdiag) and once on Slurm 25.11, where
the exporter reads them from slurmctld's own metrics endpoint (HTTP on its port, not an RPC).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import yaml

from bench.b8_k8s import cluster_file
from bench.common import invoke

ROUNDS = 10
# as Prometheus scrapes: with the cluster's metrics token, which the exporter's container mounts
FETCH = (
    "u.urlopen(u.Request('http://127.0.0.1:9341/metrics', headers={'Authorization': "
    "'Bearer ' + open('/run/secrets/metrics-token').read().strip()})).read()"
)
SCRAPE = (
    f"import time, urllib.request as u; t = time.perf_counter(); {FETCH}; "
    "print(time.perf_counter() - t)"
)
TEXT = f"import urllib.request as u; print({FETCH}.decode())"


# the images each run deploys: as shipped, then the first cell whose slurmctld serves metrics
RUNS = {"shipped": None, "25.11": {"set": "current", "cell": "25.11.7-cuda12.2.2-debian12"}}


def main() -> None:
    for label, images in RUNS.items():
        run(label, images)


def run(run_label: str, images: dict | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        name = f"sfb15{os.getpid() % 10000}"
        path = cluster_file(root, name)
        data = yaml.safe_load(path.read_text())
        data["slurm"] = {"conf": {"MaxNodeCount": 128}}  # room for dynamic nodes
        if images:
            data["images"] = images
        path.write_text(yaml.safe_dump(data))
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        where = ["--cluster", str(path), "--out", str(root / "out")]

        def sh(service: str, *argv: str) -> str:
            argv_ = ["docker", "exec", f"{name}_{service}_1", *argv]
            return subprocess.run(argv_, capture_output=True, text=True, check=True).stdout

        def rpcs(uid: int) -> int:
            stats = json.loads(sh("slurmctld", "sdiag", "--json"))["statistics"]
            return sum(u["count"] for u in stats["rpcs_by_user"] if u["user_id"] == uid)

        def measure(label: str) -> tuple[float, float, float, float]:
            uid = int(sh("exporter", "id", "-u", "slurm-exporter"))
            before = rpcs(uid)
            took = [float(sh("exporter", "python3", "-c", SCRAPE)) for _ in range(ROUNDS)]
            scrape_rpcs = (rpcs(uid) - before) / ROUNDS
            before = rpcs(0)
            # timed inside the container, as the scrape is (no docker exec in either)
            timed = "TIMEFORMAT=%R; time (sinfo >/dev/null && squeue >/dev/null)"
            hand = []
            for _ in range(ROUNDS):
                argv = ["docker", "exec", f"{name}_slurmctld_1", "bash", "-c", timed]
                done = subprocess.run(argv, capture_output=True, text=True, check=True)
                hand.append(float(done.stderr.split()[-1]))
            # less this function's own sdiag (REQUEST_STATS_INFO, one per reading)
            hand_rpcs = (rpcs(0) - before - 1) / ROUNDS
            scrape, by_hand = sorted(took)[ROUNDS // 2], sorted(hand)[ROUNDS // 2]
            text = sh("exporter", "python3", "-c", TEXT)
            source = re.search(r'slurm_scheduler_source\{source="([^"]+)"\}', text)[1]
            print(
                f"B15 {run_label} (scheduler from {source}), {label}: "
                f"scrape {scrape * 1000:.0f} ms, {scrape_rpcs:.1f} RPCs; "
                f"sinfo+squeue by hand {by_hand * 1000:.0f} ms, "
                f"{hand_rpcs:.1f} RPCs; ratio time {scrape / by_hand:.2f}, "
                f"RPCs {scrape_rpcs / hand_rpcs:.2f}"
            )
            return scrape, scrape_rpcs, by_hand, hand_rpcs

        try:
            invoke("deploy", *where)
            job = "chroot /jail bash -c 'cd /root && sbatch -N1 --wrap \"sleep 60\"'"
            sh("login", "bash", "-c", f"for i in 1 2 3; do {job}; done")
            measure("2 nodes")
            sh(
                "slurmctld", "scontrol", "create",
                "NodeName=sim-[0-61]", "CPUs=1", "RealMemory=1024", "State=FUTURE",
            )  # fmt: skip
            measure("64 nodes")
        finally:
            invoke("down", "--volumes", *where)


if __name__ == "__main__":
    main()
