"""B5: `invoke deploy` to all-nodes-idle on warm images, and 200 trivial batch jobs.

A throwaway cluster (its own name, port, state and manifest directories) from the shipped
cluster file: the first deploy starts from nothing but the images (fresh volumes, a new munge key,
a full jail populate); the second is a redeploy of the running cluster. Then 200
`sbatch --wrap=true` from a jail user on the login node, timed from the first submission until
the queue is empty. Target: deploy <= 30 s.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import docker
import yaml

from bench.common import ROOT, invoke

JOBS = 200


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "layers").symlink_to(ROOT / "deploy" / "layers")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        data = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
        data.update(name="sfbench", login={"address": "127.0.0.1", "port": port})
        (root / "cluster.yaml").write_text(yaml.safe_dump(data))
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        where = ["--cluster", str(root / "cluster.yaml"), "--out", str(root / "out")]
        try:
            first = invoke("deploy", *where)
            again = invoke("deploy", *where)
            rate, submit = jobs(docker.from_env())
        finally:
            invoke("down", "--volumes", *where)
    print(
        f"deploy to all nodes idle (warm images, fresh volumes): {first:.1f} s "
        f"(target <= 30 s; ratio {first / 30:.2f})"
    )
    print(f"redeploy of the running cluster: {again:.1f} s")
    print(
        f"{JOBS} x sbatch --wrap=true: {rate:.1f} jobs/s end to end "
        f"(submission alone {JOBS / submit:.0f} jobs/s)"
    )


def jobs(client: docker.DockerClient) -> tuple[float, float]:
    (login,) = client.containers.list(
        filters={
            "label": ["com.docker.compose.project=sfbench", "com.docker.compose.service=login"]
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
