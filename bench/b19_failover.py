"""B19: a controller lost while users submit, on the local target, against the baseline of a
plain restart of a single controller, in the same run.

Two clusters, the shipped one each, one after the other:
- baseline (controller.replicas: 1): slurmctld's container is SIGKILLed (its init, as a crash
  or the OOM killer would) and Docker's restart policy starts it again;
- failover (controller.replicas: 2, failover_after 10 s): the primary's container is killed for
  good (docker kill: no restart), and the backup takes control.
Each time a user on the login node submits `sbatch --wrap true` one after another from before
the kill until well after it; timed from the kill to the acceptance of the first submission sent
after it (sbatch itself waits for a controller). Jobs lost: accepted job IDs that do not end
COMPLETED in sacct. A SIGKILLed slurmctld loses what it accepted since its last state save
(at most about 6 s before: src/slurmctld/state_save.c), with or without a backup.

    python -m bench.b19_failover
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import docker
import yaml

from bench.b8_k8s import cluster_file
from bench.common import invoke

STREAM = (
    "rm -f ~/stop; until [ -e ~/stop ]; do t=$(date +%s.%N); "
    "r=$(sbatch --parsable -o /dev/null --wrap true 2>&1 | tail -1); "
    'echo "$t $(date +%s.%N) $r"; sleep 0.2; done'
)


def measure(root: Path, name: str, replicas: int) -> tuple[float, int, int]:
    """Seconds from the kill to the next accepted submission; jobs accepted; jobs lost."""
    path = cluster_file(root, name)
    data = yaml.safe_load(path.read_text())
    data.update(controller={"replicas": replicas, "failover_after": 10}, metrics={"enabled": False})
    path.write_text(yaml.safe_dump(data))
    where = ["--cluster", str(path), "--out", str(root / "out")]
    os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
    client = docker.from_env()

    def container(service: str):
        labels = [f"com.docker.compose.project={name}", f"com.docker.compose.service={service}"]
        (found,) = client.containers.list(all=True, filters={"label": labels})
        return found

    def submit(command: str) -> str:
        argv = ["chroot", "/jail", "su", "-", "bench", "-c", command]
        return container("login").exec_run(argv).output.decode().strip()

    try:
        invoke("deploy", *where)
        container("login").exec_run(["chroot", "/jail", "createuser", "--non-interactive", "bench"])
        out: list[str] = []
        stream = threading.Thread(target=lambda: out.append(submit(STREAM)), daemon=True)
        stream.start()
        time.sleep(5)
        primary = container("slurmctld")
        killed = time.time()
        if replicas == 1:
            os.kill(primary.attrs["State"]["Pid"], signal.SIGKILL)  # restarted by Docker
        else:
            primary.kill()  # gone: the backup takes control
        time.sleep(40)
        submit("touch ~/stop")
        stream.join(timeout=300)
        answers = [line.split(" ", 2) for line in out[0].splitlines() if line.count(" ") >= 2]
        accepted = [(float(t0), float(t1), job) for t0, t1, job in answers if job.isdigit()]
        # the first submission sent after the kill, when it was accepted
        first = min(t1 for t0, t1, _ in accepted if t0 > killed)
        jobs = [job for _, _, job in accepted]
        lost = lost_jobs(submit, jobs)
        return first - killed, len(jobs), lost
    finally:
        invoke("down", "--volumes", *where)


def lost_jobs(submit, jobs: list[str], timeout: float = 180) -> int:
    """Accepted jobs that have not ended COMPLETED in sacct within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        out = submit(f"sacct -n -P -X -j {','.join(jobs)} -o JobID,State")
        done = {line.split("|")[0] for line in out.splitlines() if line.endswith("|COMPLETED")}
        if len(done & set(jobs)) == len(jobs) or time.monotonic() > deadline:
            return len(set(jobs) - done)
        time.sleep(3)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        restart = measure(Path(tmp) / "one", "sfbench19a", 1)
    with tempfile.TemporaryDirectory() as tmp:
        failover = measure(Path(tmp) / "two", "sfbench19b", 2)
    for label, (took, accepted, lost) in (
        ("local, one controller restarted (baseline)", restart),
        ("local, primary lost, backup takes control", failover),
    ):
        print(
            f"{label}: kill -> next sbatch accepted {took:.1f} s; {accepted} accepted, {lost} lost"
        )
    print(f"failover / restart: {failover[0] / restart[0]:.2f}")


if __name__ == "__main__":
    main()
