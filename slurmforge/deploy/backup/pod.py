"""The k8s target's scheduled backup: the program its CronJob's pod runs
(`python3 -m slurmforge.deploy.backup.pod`, in the database image). The pod mounts StateSave, the
jail and the secrets, reaches the database over the network, and writes the archive snapshot.py
makes of what the deploy's plan (JSON) names; it keeps the newest ``--keep``. Standard library
only, as snapshot.py.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from slurmforge.deploy.backup import archive
from slurmforge.deploy.backup.snapshot import Plan, Snapshot
from slurmforge.errors import ConfigError, DeployError


class PodSource:
    """The scheduled pod's own view: StateSave and the jail mounted read-only at their usual
    paths, each secret as a file, the database over the network as ``user`` with the password
    in ``password_file`` (written into a client option file of mode 0600, never argv)."""

    def __init__(self, host: str | None, user: str, password_file: str | None) -> None:
        self.db = ""
        if host is not None and password_file is not None:
            password = Path(password_file).read_text().strip()
            fd, name = tempfile.mkstemp(prefix="client-", suffix=".cnf")
            with open(fd, "w") as fh:
                fh.write(f"[client]\nhost={host}\nuser={user}\npassword={password}\n")
            self.db = f"--defaults-extra-file={name}"

    def sh(self, where: str, command: str) -> tuple[int, str]:
        proc = subprocess.run(
            ["bash", "-c", command], stdin=subprocess.DEVNULL, capture_output=True, text=True
        )
        out = proc.stdout if proc.returncode == 0 else proc.stderr + proc.stdout
        return proc.returncode, out.strip()

    def argv(self, where: str, command: str) -> list[str]:
        return ["bash", "-c", command]

    def secret(self, file: str, at: str) -> bytes | None:
        path = Path(at)
        return path.read_bytes() if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m slurmforge.deploy.backup.pod",
        description="Back up the cluster this pod mounts into --out, keeping the newest --keep.",
    )
    parser.add_argument("plan", type=Path, help="the plan the k8s renderer wrote (JSON)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep", type=int, required=True)
    parser.add_argument("--db-host")
    parser.add_argument("--db-user", default="slurm")
    parser.add_argument("--db-password-file")
    args = parser.parse_args(argv)
    try:
        plan = Plan.load(args.plan)
        source = PodSource(args.db_host, args.db_user, args.db_password_file)
        _, lines = Snapshot(plan, source, args.out).run()
    except (ConfigError, DeployError, OSError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)  # one line in the job's log, no traceback
        return 1
    print("\n".join(lines))
    for old in archive.prune(args.out, plan.cluster, args.keep):
        print(f"removed {old.name} (keeping the newest {args.keep})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
