"""B5: `invoke deploy` to all-nodes-idle on warm images, and 200 trivial batch jobs, with
accounting (MariaDB, slurmdbd, slurmrestd) and without it, in the same run.

For each variant a throwaway cluster (its own name, port, state and manifest directories) from
the shipped cluster file: the first deploy starts from nothing but the images (fresh volumes, new
secrets, a full jail populate, and with accounting a fresh database); the second is a redeploy of
the running cluster. Then 200 `sbatch --wrap=true` from a jail user on the login node, timed from
the first submission until the queue is empty. Targets: deploy <= 30 s, and with accounting
<= 1.5 x the deploy without it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import docker
import yaml

from bench.common import ROOT, free_ports, invoke

JOBS = 200
VARIANTS = {
    "without accounting": {"accounting": {"enabled": False}, "rest": {"enabled": False}},
    "with accounting": {},  # the shipped default: MariaDB, slurmdbd and slurmrestd
}


def measure(name: str, changes: dict) -> tuple[float, float, float, float]:
    """First deploy, redeploy (s), end-to-end jobs/s, submission alone (s)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "layers").symlink_to(ROOT / "deploy" / "layers")
        data = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
        data = free_ports({**data, "name": name, **changes})
        (root / "cluster.yaml").write_text(yaml.safe_dump(data))
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        where = ["--cluster", str(root / "cluster.yaml"), "--out", str(root / "out")]
        try:
            first = invoke("deploy", *where)
            again = invoke("deploy", *where)
            rate, submit = jobs(docker.from_env(), name)
        finally:
            invoke("down", "--volumes", *where)
    return first, again, rate, submit


def main() -> None:
    results = {label: measure(f"sfbench{i}", c) for i, (label, c) in enumerate(VARIANTS.items())}
    base = results["without accounting"]
    for label, (first, again, rate, submit) in results.items():
        print(
            f"{label}: deploy to all nodes idle (warm images, fresh volumes) {first:.1f} s "
            f"(target <= 30 s; ratio {first / 30:.2f}), redeploy {again:.1f} s, "
            f"{JOBS} x sbatch --wrap=true {rate:.1f} jobs/s end to end "
            f"(submission alone {JOBS / submit:.0f} jobs/s)"
        )
    acct = results["with accounting"]
    print(
        f"accounting on / off: deploy {acct[0] / base[0]:.2f} x (target <= 1.5 x), "
        f"jobs/s {acct[2] / base[2]:.2f} x"
    )


def jobs(client: docker.DockerClient, project: str) -> tuple[float, float]:
    (login,) = client.containers.list(
        filters={
            "label": [f"com.docker.compose.project={project}", "com.docker.compose.service=login"]
        }
    )

    def jail(cmd: str) -> str:
        code, out = login.exec_run(["chroot", "/jail", "su", "-", "bench", "-c", cmd])
        if code:
            raise subprocess.CalledProcessError(code, cmd, out)
        return out.decode().strip()

    login.exec_run(["chroot", "/jail", "createuser", "--non-interactive", "bench"])
    start = time.perf_counter()
    jail(f"for i in $(seq {JOBS}); do sbatch -Q -o /dev/null --wrap=true; done")
    submitted = time.perf_counter() - start
    while jail("squeue -h -u bench | wc -l") != "0":
        time.sleep(0.2)
    return JOBS / (time.perf_counter() - start), submitted


if __name__ == "__main__":
    main()
