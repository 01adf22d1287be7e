"""B25 (the disruption part): a node taken on purpose under a job against a node lost under the
same job, on the local target, in the same run.

The shipped cluster (as B8 deploys it), a batch job of the user's on cpu-0 each time (Slurm's
default: it may be requeued), three times:
- lost (the baseline): cpu-0's container init SIGKILLed under a 600 s job, as a crash would;
- planned, the job outlives the wait: a deploy that changes the node set's definition (an
  environment variable) with disruption.max_wait 0, under a 600 s job;
- planned, the job ends within the wait: the same with max_wait 60, under a 20 s job.
Each prints the job's outcome (its sacct records, oldest first: NODE_FAIL is a lost run,
REQUEUED one the deploy requeued under the same ID) and the seconds from the disruption's start
(the kill, the deploy's start) until cpu-0 is back in service (idle, or running the job again),
with the ratio to the lost node's.

    python -m bench.b25_disruption
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import docker
import yaml

from bench.b8_k8s import cluster_file
from bench.b10_node_loss import until
from bench.common import invoke

IN_SERVICE = ("idle", "alloc", "mix")


class Bench:
    def __init__(self, root: Path, name: str) -> None:
        self.path = cluster_file(root, name)
        self.name = name
        self.where = ["--cluster", str(self.path), "--out", str(root / "out")]
        self.client = docker.from_env()

    def container(self, service: str):
        labels = [f"com.docker.compose.project={self.name}",
                  f"com.docker.compose.service={service}"]  # fmt: skip
        (found,) = self.client.containers.list(filters={"label": labels})
        return found

    def ctl(self, command: str) -> str:
        out = self.container("slurmctld").exec_run(["bash", "-c", command]).output
        return out.decode().strip()

    def submit(self, seconds: int) -> str:
        command = f"sbatch --parsable -w cpu-0 -o /dev/null --wrap 'sleep {seconds}'"
        argv = ["chroot", "/jail", "su", "-", "bench", "-c", command]
        job = self.container("login").exec_run(argv).output.decode().strip()
        until(lambda: self.ctl(f"squeue -h -j {job} -o %T") == "RUNNING", 120)
        return job

    def in_service(self) -> bool:
        return self.ctl("sinfo -h -n cpu-0 -o %t") in IN_SERVICE

    def runs(self, job: str) -> str:
        """The job's records, oldest first, once its first run has ended."""
        out = self.ctl(f"sacct -n -P -X -D -j {job} -o State")
        return " then ".join(out.split())

    def lost(self, seconds: int) -> tuple[str, float]:
        job = self.submit(seconds)
        target = self.container("cpu-0")
        start = time.perf_counter()
        os.kill(target.attrs["State"]["Pid"], signal.SIGKILL)
        # the restart policy runs it again, and it tells slurmctld it lost its jobs: they end
        # (requeued here), and the node is back once its slurmd has registered
        until(lambda: " Restarts=1 " in f" {self.ctl(f'scontrol -o show job {job}')} ", 120)
        back = until(self.in_service)
        outcome = self._ended(job)
        self.ctl(f"scancel {job}")
        return outcome, back - start

    def planned(self, seconds: int, wait: int, mark: str) -> tuple[str, float]:
        job = self.submit(seconds)
        data = yaml.safe_load(self.path.read_text())
        data["nodesets"][0]["env"] = {"BENCH_MARK": mark}
        data["disruption"] = {"max_wait": wait}
        self.path.write_text(yaml.safe_dump(data))
        start = time.perf_counter()
        invoke("deploy", *self.where)
        back = until(self.in_service)
        outcome = self._ended(job)
        self.ctl(f"scancel {job}")
        return outcome, back - start

    def _ended(self, job: str) -> str:
        """The records of the job's first run once it has one (slurmdbd has it)."""
        until(lambda: self.runs(job).split(" then ")[0] not in ("", "RUNNING", "PENDING"), 120)
        return self.runs(job)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), f"sfb25d{os.getpid() % 10000}")
        os.environ["SLURMFORGE_STATE_DIR"] = str(Path(tmp) / "state")
        invoke("deploy", *bench.where)
        try:
            bench.container("login").exec_run(
                ["chroot", "/jail", "createuser", "--non-interactive", "bench"]
            )
            lost = bench.lost(600)
            outlived = bench.planned(600, 0, "1")
            within = bench.planned(20, 60, "2")
        finally:
            invoke("down", "--volumes", *bench.where)
    print("B25 disruption: a job on cpu-0 of the shipped cluster; seconds until cpu-0 serves again")
    print(f"  lost (container killed), 600 s job: {lost[0]:<32} {lost[1]:6.1f} s (baseline)")
    for what, (outcome, took) in (
        ("planned, max_wait 0, 600 s job:  ", outlived),
        ("planned, max_wait 60, 20 s job:  ", within),
    ):
        print(f"  {what} {outcome:<32} {took:6.1f} s ({took / lost[1]:.2f}x)")


if __name__ == "__main__":
    main()
