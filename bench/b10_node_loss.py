"""B10: a node lost under a running job, on the local target and on k8s (../shared/k8s-lab), in
the same run.

The shipped cluster (as B8 deploys it) on each target, then twice per target:
- baseline: a node restarted with no job on it (container init SIGKILLed, or pod deleted with no
  grace) and timed from the moment it runs again (container restarted / new pod Running) until
  a job step runs on it (`srun -w NODE true` succeeds);
- loss: the same under a 2-node batch job (`srun sleep 600`, --no-requeue), timed from the same
  moment until the job has its final state (NODE_FAIL), until both nodes are idle, and until a
  step runs on the lost node.
The ratio loss/baseline (until a step runs) is what ending the lost job costs a node's return.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker

from bench.b8_k8s import cluster_file, k8s_deploy
from bench.common import invoke
from tests.k8s import lab

Sh = Callable[[str], str]  # a command on slurmctld; its output
LIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


def until(check: Callable[[], bool], timeout: float = 300) -> float:
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"not within {timeout} s")
        time.sleep(0.2)
    return time.perf_counter()


def idle(ctl: Sh, *nodes: str) -> bool:
    states = ctl(f"sinfo -h -N -n {','.join(nodes)} -o '%N %t'").split()
    return states[1::2] == ["idle"] * len(nodes)


def job_state(ctl: Sh, job: str) -> str:
    out = ctl(f"scontrol -o show job {job}")
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")


def usable(submit: Sh, node: str) -> bool:
    """A step runs on ``node`` (slurmd there registered and answers)."""
    return submit(f"srun -Q -w {node} -t 1 true && echo ran").endswith("ran")


def lost_job(ctl: Sh, submit: Sh, lose: Callable[[], float]) -> tuple[float, float, float, str]:
    """Seconds from the node's return to the job's final state, to both nodes idle and to a
    step run on the lost node (cpu-0)."""
    job = submit("sbatch --parsable --no-requeue -N2 -o /dev/null --wrap 'srun sleep 600'")
    until(lambda: f"{job}.0 cpu-[0-1]" in ctl(f"squeue -h -s -j {job} -o '%i %N'"))
    back = lose()
    ended = until(lambda: job_state(ctl, job) not in LIVE)
    both = until(lambda: idle(ctl, "cpu-0", "cpu-1"))
    runs = until(lambda: usable(submit, "cpu-0"))
    return ended - back, both - back, runs - back, job_state(ctl, job)


Figures = tuple[float, float, float, float, str]


def local_figures(root: Path) -> Figures:
    name = "sfbench10"
    where = ["--cluster", str(cluster_file(root, name)), "--out", str(root / "out")]
    os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
    client = docker.from_env()

    def container(service: str):
        labels = [f"com.docker.compose.project={name}", f"com.docker.compose.service={service}"]
        (found,) = client.containers.list(filters={"label": labels})
        return found

    def ctl(command: str) -> str:
        return container("slurmctld").exec_run(["bash", "-c", command]).output.decode().strip()

    def submit(command: str) -> str:
        argv = ["chroot", "/jail", "su", "-", "bench", "-c", command]
        return container("login").exec_run(argv).output.decode().strip()

    def kill(node: str) -> float:
        target = container(node)
        restarts = target.attrs["RestartCount"]
        os.kill(target.attrs["State"]["Pid"], signal.SIGKILL)

        def running() -> bool:
            target.reload()
            return target.attrs["RestartCount"] > restarts and target.status == "running"

        return until(running)

    try:
        invoke("deploy", *where)
        container("login").exec_run(["chroot", "/jail", "createuser", "--non-interactive", "bench"])
        back = kill("cpu-1")
        baseline = until(lambda: usable(submit, "cpu-1")) - back
        lost = lost_job(ctl, submit, lambda: kill("cpu-0"))
    finally:
        invoke("down", "--volumes", *where)
    return (baseline, *lost)


def k8s_figures(root: Path) -> Figures:
    name = "sfbench10k"
    env = lab.start()

    def kubectl(*args: str) -> str:
        argv = [lab.KUBECTL, "--namespace", name, *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True).stdout.strip()

    def ctl(command: str) -> str:
        return kubectl("exec", "slurmctld-0", "-c", "slurmctld", "--", "bash", "-c", command)

    def in_jail(*argv: str) -> str:
        return kubectl("exec", "login-0", "-c", "login", "--", "chroot", "/jail", *argv)

    def submit(command: str) -> str:
        return in_jail("su", "-", "bench", "-c", command)

    def delete(pod: str) -> float:
        old = kubectl("get", "pod", pod, "-o", "jsonpath={.metadata.uid}")
        kubectl("delete", "pod", pod, "--grace-period=0", "--force", "--wait=false")

        def running() -> bool:
            fmt = "jsonpath={.metadata.uid} {.status.phase}"
            uid, _, phase = kubectl("get", "pod", pod, "-o", fmt).partition(" ")
            return uid not in ("", old) and phase == "Running"

        return until(running)

    try:
        k8s_deploy(root, name, env)
        in_jail("createuser", "--non-interactive", "bench")
        back = delete("cpu-1")
        baseline = until(lambda: usable(submit, "cpu-1")) - back
        lost = lost_job(ctl, submit, lambda: delete("cpu-0"))
    finally:
        subprocess.run(
            [lab.KUBECTL, "delete", "namespace", name, "--wait=false"],
            env=env,
            capture_output=True,
        )
        lab.recipe("down")
    return (baseline, *lost)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        local = local_figures(Path(tmp) / "local")
    with tempfile.TemporaryDirectory() as tmp:
        k8s = k8s_figures(Path(tmp) / "k8s")
    for target, (baseline, ended, both, runs, state) in (("local", local), ("k8s (lab)", k8s)):
        print(f"{target}: node back, no job -> a step runs on it: {baseline:.1f} s")
        print(
            f"{target}: node back under a job -> job {state} {ended:.1f} s, both nodes idle "
            f"{both:.1f} s, a step runs on it {runs:.1f} s (ratio to no job {runs / baseline:.2f})"
        )


if __name__ == "__main__":
    main()
