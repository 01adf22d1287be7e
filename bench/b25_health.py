"""B25 (the health check's part): what the node health check costs a node at the default
interval. On the shipped cluster, on cpu-0: the checker (images/slurmd/node-health, as slurmd
runs it: root, SLURMD_NODENAME set) run ROUNDS times, its CPU seconds (user + system, from bash's
`time` inside the node's container, so no docker exec is counted) against the same number of
`scontrol -o show node cpu-0` alone, the one Slurm query it makes, timed the same way in the same
run. Prints CPU per run, the ratio to the query, and the share of one core it takes at the
default interval (health.interval, 60 s) and at the tests' 5 s.

    python -m bench.b25_health
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from bench.b8_k8s import cluster_file
from bench.common import invoke
from slurmforge.deploy.spec.health import PROGRAM, HealthSpec

ROUNDS = 50
# CPU seconds (user, system) of a loop of the command, from bash's own `time` in the container
TIMED = (
    "TIMEFORMAT='%3U %3S'; "
    "{{ time (for i in $(seq {n}); do {command} > /dev/null 2>&1; done) ; }} 2>&1 | tail -n 1"
)
SLOW_INTERVAL = HealthSpec().interval


def _cpu(container: str, command: str) -> float:
    script = TIMED.format(n=ROUNDS, command=command)
    argv = ["docker", "exec", "-e", "SLURMD_NODENAME=cpu-0", container, "bash", "-c", script]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    user, system = (float(x) for x in out.split())
    return (user + system) / ROUNDS


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        name = f"sfb25{os.getpid() % 10000}"
        path = cluster_file(root, name)
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        where = ["--cluster", str(path), "--out", str(root / "out")]
        invoke("deploy", *where)
        try:
            node = f"{name}_cpu-0_1"
            # every check passes on a healthy node: the checker changes nothing while timed
            check = subprocess.run(["docker", "exec", "-e", "SLURMD_NODENAME=cpu-0", node,
                                    PROGRAM], capture_output=True, text=True)  # fmt: skip
            assert check.returncode == 0, check.stdout + check.stderr
            query = _cpu(node, "scontrol -o show node cpu-0")
            checker = _cpu(node, PROGRAM)
        finally:
            invoke("down", "--volumes", *where)
    print(f"B25 health check, {ROUNDS} runs each on one node of the shipped cluster")
    print(f"  scontrol show node (baseline): {query * 1000:7.1f} ms CPU per run")
    print(f"  node-health:                   {checker * 1000:7.1f} ms CPU per run "
          f"({checker / query:.1f}x the baseline)")  # fmt: skip
    for interval in (SLOW_INTERVAL, 5):
        print(f"  at an interval of {interval:>2} s: {100 * checker / interval:.3f}% of a core")
    print(f"  goal: at most 1% of a core at the default {SLOW_INTERVAL} s")


if __name__ == "__main__":
    main()
