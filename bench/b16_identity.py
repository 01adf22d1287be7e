"""B16: what reading users from a directory costs a launch, a job and a login, on warm images.

Three throwaway clusters from the shipped cluster file, one after the other:
- `local`: users from the jail's files (createuser), the baseline;
- `plain`: the same with `slurm.node_ssh: false` (no sshd on the nodes, no extern step per job),
  for what ssh into a job's node costs every launch;
- `ldap`: users from the embedded directory through SSSD (identity.source: ldap), whose user `ada`
  exists only there. A createuser user on the same cluster gives the local-key login baseline;
- `open`: `local` with the defaults from before users were kept out of each other's data
  (`slurm.private_data: []`, `accounting.enforce: []`), for what PrivateData and enforced
  associations cost; target: launch <= 1.05 x open, jobs/s >= 0.95 x open.
`python -m bench.b16_identity defaults` measures `local` and `open` alone.

Figures, from a user's login session in the jail:
- step launch: `srun -N2 true`, median of 20, each a job of its own; target: ldap <= 1.05 x
  local; and `srun -N2 true` as steps of one running job (under salloc);
- throughput: 200 `sbatch --wrap=true`, first submission to empty queue; target ldap >= 0.95 x;
- login: `ssh user@login true` with the user's key, median of 10, key from the directory
  (sss_ssh_authorizedkeys) against a key in ~/.ssh/authorized_keys, on the ldap cluster.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import yaml

from bench.b7_jobs import jobs_per_s, launch_ms, step_ms
from bench.common import ROOT, invoke
from tests.ports import published

LOGINS = 10
BASE = "dc=bench,dc=test"


# the defaults before issue 60: every user sees every job, no association is needed
OPEN = {"slurm": {"private_data": []}, "accounting": {"enforce": []}}


def cluster_file(
    root: Path, name: str, key: str | None, node_ssh: bool = True, changes: dict | None = None
) -> Path:
    data = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
    data.update(name=name, **published(), **(changes or {}))
    if not node_ssh:
        data["slurm"] = {**data.get("slurm", {}), "node_ssh": False}
    if key is not None:
        (root / "directory.ldif").write_text(
            f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: B\ndc: bench\n\n"
            f"dn: cn=readers,{BASE}\nobjectClass: posixGroup\ncn: readers\ngidNumber: 40000\n\n"
            f"dn: uid=ada,{BASE}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            "objectClass: ldapPublicKey\nuid: ada\ncn: ada\nsn: ada\nuidNumber: 40001\n"
            f"gidNumber: 40000\nhomeDirectory: /home/ada\nloginShell: /bin/bash\n"
            f"sshPublicKey: {key}\n"
        )
        data["identity"] = {"source": "ldap", "ldap": {"embedded": True, "base_dn": BASE}}
    (root / "layers").symlink_to(ROOT / "deploy" / "layers")
    path = root / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def session(client: docker.DockerClient, name: str, user: str):
    labels = [f"com.docker.compose.project={name}", "com.docker.compose.service=login"]
    (login,) = client.containers.list(filters={"label": labels})

    def run(cmd: str) -> str:
        code, out = login.exec_run(["chroot", "/jail", "su", "-", user, "-c", cmd])
        if code:
            raise subprocess.CalledProcessError(code, cmd, out)
        return out.decode().strip()

    return login, run


def ssh_ms(port: int, user: str, key: Path) -> float:
    argv = ["ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes"]
    argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    argv += ["-o", "LogLevel=ERROR", f"{user}@127.0.0.1", "true"]
    subprocess.run(argv, check=True)  # warm
    times = []
    for _ in range(LOGINS):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(
    root: Path, name: str, key: Path | None, node_ssh: bool = True, changes: dict | None = None
) -> dict[str, float]:
    public = key.with_suffix(".pub").read_text().strip() if key else None
    path = cluster_file(root, name, public, node_ssh, changes)
    port = yaml.safe_load(path.read_text())["login"]["port"]
    where = ["--cluster", str(path), "--out", str(root / "out")]
    os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
    client = docker.from_env()
    out: dict[str, float] = {}
    try:
        invoke("deploy", *where)
        login, _ = session(client, name, "root")
        argv = ["chroot", "/jail", "createuser", "--non-interactive", "bench"]
        code, made = login.exec_run([*argv, "--ssh-key", public or "ssh-ed25519 AAAA"])
        if code:
            raise RuntimeError(f"createuser bench: {made.decode()}")
        user = "bench"
        if key is not None:
            login.exec_run(["chroot", "/jail", "mkhomedir_helper", "ada", "0077"])
            user = "ada"
            out["ssh ldap"] = ssh_ms(port, "ada", key)
            out["ssh local"] = ssh_ms(port, "bench", key)
        _, run = session(client, name, user)
        out["launch"] = launch_ms(run, "-p main -N2")
        out["step"] = step_ms(run, "-p main -N2")
        out["jobs"] = jobs_per_s(run, "main", user)
    finally:
        invoke("down", "--volumes", *where)
    return out


def defaults(local: dict[str, float], open_: dict[str, float]) -> None:
    print("private jobs and enforced associations (local, the defaults) vs open (before them):")
    launch, jobs = local["launch"] / open_["launch"], local["jobs"] / open_["jobs"]
    print(f"  launch {local['launch']:.0f} vs {open_['launch']:.0f} ms: {launch:.2f} x "
          f"(target <= 1.05); {local['jobs']:.1f} vs {open_['jobs']:.1f} jobs/s: {jobs:.2f} x "
          "(target >= 0.95)")  # fmt: skip


def main() -> None:
    only_defaults = sys.argv[1:] == ["defaults"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        key = root / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        for arm in ("local", "ldap", "plain", "open"):
            (root / arm).mkdir()
        local = measure(root / "local", "sfbench16l", None)
        open_ = measure(root / "open", "sfbench16o", None, changes=OPEN)
        if only_defaults:
            defaults(local, open_)
            return
        ldap = measure(root / "ldap", "sfbench16d", key)
        plain = measure(root / "plain", "sfbench16p", None, node_ssh=False)
    defaults(local, open_)
    print("srun -N2 true, median of 20:")
    print(f"  local {local['launch']:6.0f} ms   ldap {ldap['launch']:6.0f} ms   "
          f"ratio {ldap['launch'] / local['launch']:.2f} (target <= 1.05)")  # fmt: skip
    print("200 x sbatch --wrap=true, submission to empty queue:")
    print(f"  local {local['jobs']:6.1f} jobs/s   ldap {ldap['jobs']:6.1f} jobs/s   "
          f"ratio {ldap['jobs'] / local['jobs']:.2f} (target >= 0.95)")  # fmt: skip
    print("slurm.node_ssh (sshd on the nodes, PrologFlags=Contain) on vs off, local users:")
    print(f"  launch {local['launch']:.0f} vs {plain['launch']:.0f} ms: "
          f"{local['launch'] / plain['launch']:.2f} x; {local['jobs']:.1f} vs "
          f"{plain['jobs']:.1f} jobs/s: {local['jobs'] / plain['jobs']:.2f} x")  # fmt: skip
    print(f"  a step inside a running job (srun -N2 true under salloc): {local['step']:.0f} vs "
          f"{plain['step']:.0f} ms: {local['step'] / plain['step']:.2f} x")  # fmt: skip
    print(f"ssh with a key to `true`, median of {LOGINS} (ldap cluster):")
    ssh_local, ssh_ldap = ldap["ssh local"], ldap["ssh ldap"]
    print(f"  key in ~/.ssh {ssh_local:6.0f} ms   key in the directory {ssh_ldap:6.0f} ms   "
          f"ratio {ssh_ldap / ssh_local:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
