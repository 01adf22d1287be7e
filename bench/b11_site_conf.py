"""B11: a changed slurm.conf setting deployed on a running cluster, on the local target and on
../shared/k8s-lab: seconds until slurmctld runs with it, against a redeploy that changes nothing
(same run, same cluster); and the jobs it killed (the target: 0), with on k8s the pods replaced.

A throwaway cluster from the shipped cluster file with the site's SchedulerParameters; two batch
jobs (one per node) run through every redeploy. Each change edits the cluster file
(bf_interval=N) and runs `invoke deploy`; "live" is when `scontrol show config` says the value.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.b8_k8s import INVOKE, cluster_file, k8s_deploy
from bench.common import ROOT, container_sh, invoke
from tests.k8s import lab

ROUNDS = 3
Sh = Callable[[str, str], str]  # (service, command) → output


def rounds(path: Path, deploy: Callable[[], float], sh: Sh) -> tuple[float, float, int]:
    """Best unchanged redeploy, best changed redeploy until live, jobs killed."""
    data = yaml.safe_load(path.read_text())
    data["slurm"] = {"conf": {"SchedulerParameters": "bf_interval=30"}}
    path.write_text(yaml.safe_dump(data))
    deploy()
    submit = shlex.quote("cd /root && sbatch -n1 --parsable --wrap 'sleep 3600'")
    jobs = [sh("login", f"chroot /jail bash -c {submit}") for _ in range(2)]

    def states() -> set[str]:
        out = sh("slurmctld", f"sacct -n -X -P -j {','.join(jobs)} -o State")
        return set(out.split())

    def config() -> str:
        out = sh("slurmctld", "scontrol show config")
        return re.search(r"^SchedulerParameters\s+= (.*)$", out, re.M)[1].strip()

    _until(lambda: states() == {"RUNNING"})
    same, changed = [], []
    for i in range(ROUNDS):
        same.append(deploy())
        value = f"bf_interval={31 + i}"
        data["slurm"]["conf"]["SchedulerParameters"] = value
        path.write_text(yaml.safe_dump(data))
        start = time.perf_counter()
        deploy()
        _until(lambda v=value: config() == v)
        changed.append(time.perf_counter() - start)
    killed = 0 if states() == {"RUNNING"} else len(jobs)
    sh("slurmctld", f"scancel {' '.join(jobs)}")
    return min(same), min(changed), killed


def local(root: Path) -> tuple[float, float, int]:
    name = f"sfb11{os.getpid() % 10000}"
    path = cluster_file(root, name)
    os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
    where = ["--cluster", str(path), "--out", str(root / "out")]

    sh = container_sh(name)

    try:
        invoke("deploy", *where)
        return rounds(path, lambda: invoke("deploy", *where), sh)
    finally:
        invoke("down", "--volumes", *where)


def k8s(root: Path) -> tuple[float, float, int, bool]:
    """Also whether every pod is the one from before the changes (none replaced)."""
    name = "sfbench11k"
    env = lab.start()

    def kubectl(*args: str) -> str:
        argv = [lab.KUBECTL, "--namespace", name, *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout

    def sh(service: str, command: str) -> str:
        return kubectl("exec", f"{service}-0", "-c", service, "--", "bash", "-c", command).strip()

    def deploy() -> float:
        where = ["--cluster", str(root / name / "cluster.yaml"), "--out", str(root)]
        start = time.perf_counter()
        argv = [*INVOKE, "deploy", "--target", "k8s", "--timeout", "300", *where]
        subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start

    try:
        k8s_deploy(root, name, env)
        path = root / name / "cluster.yaml"
        uids = kubectl("get", "pods", "-o", "jsonpath={.items[*].metadata.uid}")
        same, changed, killed = rounds(path, deploy, sh)
        kept = set(uids.split()) >= set(
            kubectl("get", "pods", "-o", "jsonpath={.items[*].metadata.uid}").split()
        )
        return same, changed, killed, kept
    finally:
        lab.recipe("down")


def _until(ready: Callable[[], bool], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError("not reached")
        time.sleep(0.2)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        same, changed, killed = local(Path(tmp) / "local")
    print(
        f"B11 local: redeploy unchanged best {same:.2f} s; changed key live after {changed:.2f} s"
    )
    print(f"B11 local: ratio changed / unchanged {changed / same:.2f}; jobs killed {killed} of 2")
    with tempfile.TemporaryDirectory() as tmp:
        same, changed, killed, kept = k8s(Path(tmp) / "k8s")
    print(f"B11 k8s: redeploy unchanged best {same:.2f} s; changed key live after {changed:.2f} s")
    print(
        f"B11 k8s: ratio changed / unchanged {changed / same:.2f}; jobs killed {killed} of 2; "
        f"pods replaced: {'none' if kept else 'some'}"
    )


if __name__ == "__main__":
    main()
