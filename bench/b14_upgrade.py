"""B14: a running Slurm 24.05.8 cluster (local target, accounting on) upgraded to 25.11.7 by
`invoke deploy` on the new cell: how long slurmctld does not answer, against a plain restart of
the same slurmctld container measured in the same run; the deploy's wall time; and the jobs lost
(the target: 0).

The jobs: two finished before, one holding both nodes while the upgrade starts (it must end on
its own) and four pending behind it (they must run after). "Not answering" is measured from
outside: `scontrol ping` in whichever container is the cluster's slurmctld, every 0.2 s; the
longest run of failures is the downtime.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.b8_k8s import cluster_file
from bench.common import container_sh, invoke
from tests.cluster.helpers import FROM, TO


class Downtime(threading.Thread):
    """Polls slurmctld until stopped; ``longest`` is the longest stretch it did not answer."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True)
        self.name_ = name
        self.stop = threading.Event()
        self.longest = 0.0

    def run(self) -> None:
        down_since = None
        while not self.stop.is_set():
            ok = _answers(self.name_)
            now = time.perf_counter()
            if ok and down_since is not None:
                self.longest = max(self.longest, now - down_since)
                down_since = None
            elif not ok and down_since is None:
                down_since = now
            time.sleep(0.2)


def _answers(name: str) -> bool:
    argv = ["docker", "exec", f"{name}_slurmctld_1", "scontrol", "ping"]
    return "UP" in subprocess.run(argv, capture_output=True, text=True).stdout


def measured(name: str, action: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds of ``action``, longest slurmctld outage while it ran and until it answers)."""
    watch = Downtime(name)
    watch.start()
    start = time.perf_counter()
    action()
    wall = time.perf_counter() - start
    while not _answers(name):  # until it answers again after the action
        time.sleep(0.2)
    time.sleep(0.5)
    watch.stop.set()
    watch.join()
    return wall, watch.longest


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        name = f"sfb14{os.getpid() % 10000}"
        path = cluster_file(root, name)
        data = yaml.safe_load(path.read_text())
        data["images"] = {"set": FROM[0], "cell": FROM[1]}
        path.write_text(yaml.safe_dump(data))
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        where = ["--cluster", str(path), "--out", str(root / "out")]

        sh = container_sh(name)

        def submit(args: str) -> str:
            line = shlex.quote(f"cd /root && sbatch --parsable {args}")
            return sh("login", f"chroot /jail bash -c {line}")

        try:
            invoke("build", "--set", TO[0], "--cell", TO[1])
            invoke("deploy", *where)
            jobs = [submit("--wrap true") for _ in range(2)]

            def restart_controller() -> None:
                argv = ["docker", "restart", f"{name}_slurmctld_1"]
                subprocess.run(argv, check=True, capture_output=True)

            _, restart = measured(name, restart_controller)
            time.sleep(5)
            jobs.append(submit("-N2 --exclusive --wrap 'sleep 15'"))
            jobs += [submit("-N1 --wrap 'sleep 1'") for _ in range(4)]
            data["images"] = {"set": TO[0], "cell": TO[1]}
            path.write_text(yaml.safe_dump(data))
            wall, upgrade = measured(name, lambda: invoke("deploy", *where))
            version = sh("slurmctld", "scontrol version").split()[-1]
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                states = sh("slurmctld", f"sacct -n -X -P -j {','.join(jobs)} -o State").split()
                if len(states) == len(jobs) and "PENDING" not in states and "RUNNING" not in states:
                    break
                time.sleep(2)
            lost = sum(s != "COMPLETED" for s in states) + len(jobs) - len(states)
        finally:
            invoke("down", "--volumes", *where)
    print(f"B14 baseline: slurmctld restart, not answering for {restart:.1f} s")
    print(f"B14 upgrade 24.05.8 -> {version}: deploy wall {wall:.1f} s, slurmctld not answering "
          f"for {upgrade:.1f} s")  # fmt: skip
    print(f"B14 ratio upgrade outage / restart outage: {upgrade / restart:.1f}")
    print(f"B14 jobs lost: {lost} of {len(jobs)} (2 done before, 1 running and 4 pending when "
          "the upgrade began)")  # fmt: skip


if __name__ == "__main__":
    main()
