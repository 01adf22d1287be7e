"""B19: a controller lost while users submit, on each target, against the baseline of a plain
restart of a single controller on that target, in the same run.

Four clusters, the shipped one each, one after the other:
- local baseline (controller.replicas: 1): slurmctld's container is SIGKILLed (its init, as a
  crash or the OOM killer would) and Docker's restart policy starts it again;
- local failover (controller.replicas: 2, failover_after 10 s): the primary's container is
  killed for good (docker kill: no restart), and the backup takes control;
- k8s baseline, on ../shared/k8s-lab: pod slurmctld-0 deleted (SIGTERM, its grace) and made
  again by its StatefulSet;
- k8s failover: the same deletion with the lab's node cordoned, so that the new slurmctld-0
  stays Pending and the backup (slurmctld-1) takes control; uncordoned 40 s later, the primary
  takes control back while the submissions go on.
Each time a user on the login node submits `sbatch --wrap true` one after another from before
the kill until well after it; timed from the kill to the acceptance of the first submission sent
after it (sbatch itself waits for a controller); on the lab, from the deleted pod's end (until
then it still serves). Jobs lost: accepted job IDs that do not end
COMPLETED in sacct. A SIGKILLed slurmctld loses what it accepted since its last state save
(at most about 6 s before: src/slurmctld/state_save.c), with or without a backup.

    python -m bench.b19_failover
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import docker
import yaml

from bench.b8_k8s import INVOKE, cluster_file
from bench.common import ROOT, invoke, service_container
from tests.k8s import lab

STREAM = (
    "rm -f ~/stop; until [ -e ~/stop ]; do t=$(date +%s.%N); "
    "r=$(sbatch --parsable -o /dev/null --wrap true 2>&1 | tail -1); "
    'echo "$t $(date +%s.%N) $r"; sleep 0.2; done'
)


def measure(root: Path, name: str, replicas: int) -> tuple:
    """Seconds from the kill to the next accepted submission; jobs accepted; jobs lost, and
    what became of them."""
    path = cluster_file(root, name)
    data = yaml.safe_load(path.read_text())
    data.update(controller={"replicas": replicas, "failover_after": 10}, metrics={"enabled": False})
    path.write_text(yaml.safe_dump(data))
    where = ["--cluster", str(path), "--out", str(root / "out")]
    os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
    client = docker.from_env()

    def container(service: str):
        return service_container(client, name, service)

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
        return summary(out[0], killed, submit)
    finally:
        invoke("down", "--volumes", *where)


def lost_jobs(submit, jobs: list[str], timeout: float = 180) -> tuple[int, str]:
    """Accepted jobs that have not ended COMPLETED in sacct within ``timeout``, and what became
    of them: how many sacct has no record of, and the others by state and squeue's reason."""
    deadline = time.monotonic() + timeout
    while True:
        out = submit(f"sacct -n -P -X -j {','.join(jobs)} -o JobID,State")
        states = dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
        lost = [job for job in jobs if states.get(job) != "COMPLETED"]
        if not lost or time.monotonic() > deadline:
            break
        time.sleep(3)
    queued = submit(f"squeue -h -j {','.join(lost)} -o '%i %r'") if lost else ""
    reasons = dict(line.split(" ", 1) for line in queued.splitlines() if " " in line)
    seen = Counter(
        f"{states[job]}/{reasons[job]}" if job in reasons else states.get(job, "no record")
        for job in lost
    )
    return len(lost), ", ".join(f"{n} {what}" for what, n in seen.most_common())


def k8s_measure(root: Path, env: dict[str, str], name: str, replicas: int) -> tuple:
    """On the lab: seconds from the deleted slurmctld-0's end to the next accepted submission;
    jobs accepted; jobs lost, and what became of them."""
    claims = (*lab.CLAIMS, lab.SHARED_STATE) if replicas > 1 else lab.CLAIMS
    manifest, _ = lab.volumes(root / name, name, {}, claims)
    subprocess.run([lab.KUBECTL, "apply", "-f", str(manifest)], env=env, check=True,
                   capture_output=True)  # fmt: skip
    path = cluster_file(root / name, name)
    data = yaml.safe_load(path.read_text())
    data.update(controller={"replicas": replicas, "failover_after": 10}, metrics={"enabled": False})
    path.write_text(yaml.safe_dump(data))
    where = ["--cluster", str(path), "--out", str(root / "out")]

    def kubectl(*args: str, check: bool = True) -> str:
        argv = [lab.KUBECTL, "--namespace", name, *args]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=check)
        return proc.stdout.strip()

    def submit(command: str) -> str:
        return kubectl("exec", "login-0", "-c", "login", "--", "chroot", "/jail", "su", "-",
                       "bench", "-c", command, check=False)  # fmt: skip

    subprocess.run([*INVOKE, "deploy", "--target", "k8s", "--timeout", "300", *where], cwd=ROOT,
                   env=env, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    node = kubectl("get", "pod", "slurmctld-0", "-o", "jsonpath={.spec.nodeName}")
    try:
        kubectl("exec", "login-0", "-c", "login", "--", "chroot", "/jail", "createuser",
                "--non-interactive", "bench")  # fmt: skip
        out: list[str] = []
        stream = threading.Thread(target=lambda: out.append(submit(STREAM)), daemon=True)
        stream.start()
        time.sleep(5)
        if replicas > 1:
            kubectl("cordon", node)
        # timed from the old pod's end: while its grace runs it still serves (a SIGTERMed
        # slurmctld saves its state and exits), so its deletion alone times nothing
        kubectl("delete", "pod", "slurmctld-0", "--wait=true", "--timeout=120s")
        killed = time.time()
        time.sleep(40)
        kubectl("uncordon", node)
        time.sleep(40 if replicas > 1 else 0)  # the primary takes control back meanwhile
        submit("touch ~/stop")
        stream.join(timeout=300)
        return summary(out[0], killed, submit)
    finally:
        kubectl("uncordon", node, check=False)
        kubectl("delete", "namespace", name, "--wait=true", "--timeout=300s", check=False)


def summary(out: str, killed: float, submit) -> tuple[float, int, int, str]:
    answers = [line.split(" ", 2) for line in out.splitlines() if line.count(" ") >= 2]
    accepted = [(float(t0), float(t1), job) for t0, t1, job in answers if job.isdigit()]
    # the first submission sent after the kill, when it was accepted
    first = min(t1 for t0, t1, _ in accepted if t0 > killed)
    jobs = [job for _, _, job in accepted]
    return first - killed, len(jobs), *lost_jobs(submit, jobs)


def main() -> None:
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        figures["local, one controller restarted (baseline)"] = measure(
            Path(tmp) / "one", "sfbench19a", 1
        )
    with tempfile.TemporaryDirectory() as tmp:
        figures["local, primary lost, backup takes control"] = measure(
            Path(tmp) / "two", "sfbench19b", 2
        )
    env = lab.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            figures["k8s, slurmctld-0 deleted and made again (baseline)"] = k8s_measure(
                Path(tmp), env, "sfbench19c", 1
            )
            figures["k8s, slurmctld-0 deleted on a cordoned node, backup takes control"] = (
                k8s_measure(Path(tmp), env, "sfbench19d", 2)
            )
    finally:
        lab.recipe("down")
    for label, (took, accepted, lost, what) in figures.items():
        print(
            f"{label}: kill -> next sbatch accepted {took:.1f} s; {accepted} accepted, {lost} lost"
            + (f" ({what})" if lost else "")
        )
    (restart, failover, k8s_restart, k8s_failover) = (f[0] for f in figures.values())
    print(f"local failover / restart: {failover / restart:.2f}")
    print(f"k8s failover / restart: {k8s_failover / k8s_restart:.2f}")


if __name__ == "__main__":
    main()
