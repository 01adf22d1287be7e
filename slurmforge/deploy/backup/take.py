"""`invoke backup` and the parts both restores share: a running cluster into one archive
(archive.py) without stopping anything, through the target's own way into its containers
(access.py). What is copied and how it stays consistent: snapshot.py, which also runs in the k8s
target's scheduled backup pod.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import IO, TYPE_CHECKING, ClassVar

from tqdm import tqdm

from slurmforge import jail_contract, state
from slurmforge.deploy import roles
from slurmforge.deploy.backup import archive, snapshot
from slurmforge.deploy.backup.snapshot import job_table
from slurmforge.deploy.roles import CONTROLLER, CONTROLLER_STATE, DATABASE, LOGIN
from slurmforge.deploy.slurm import upgrade
from slurmforge.deploy.spec.model import as_dict
from slurmforge.errors import ConfigError, DeployError

if TYPE_CHECKING:
    from slurmforge.deploy.backup.access import BackupAccess
    from slurmforge.deploy.spec.model import Cluster

STATE_DIR = CONTROLLER_STATE.path
DB_SOCKET = "/run/mysqld/mysqld.sock"
# the jail's user state, relative to the jail: what populate keeps, and the accounts it merges
JAIL_STATE = (
    "home", "opt/user", "etc/passwd", "etc/group", "etc/shadow", "etc/gshadow",
    "etc/ssh/ssh_host_*", ".slurmforge/jail",
)  # fmt: skip


def default_dir(cluster_name: str) -> Path:
    """Where backups go unless --out says: beside the cluster's secrets (0700)."""
    return state.cluster_dir(cluster_name) / "backups"


def _version() -> str:
    try:
        return metadata.version("slurmforge")
    except metadata.PackageNotFoundError:
        return "unknown"


def bar(what: str, total: int | None, log: IO[str]) -> tqdm:
    return tqdm(total=total, desc=what, unit="B", unit_scale=True, file=log, leave=False,
                disable=None)  # fmt: skip


def admit(cluster: Cluster, path: Path, manifest: archive.Manifest) -> bool:
    """Refuse an archive of another cluster than ``cluster``, and a move from the archive's Slurm
    to the cluster file's that Slurm cannot make; True when the restore changes the series."""
    if manifest.cluster != cluster.name:
        raise ConfigError(
            f"{path}: holds cluster {manifest.cluster}, but {cluster.path} is cluster "
            f"{cluster.name}",
            hint=f"give --cluster the file of {manifest.cluster} (the archive holds a copy under "
            "cluster/)",
        )
    return upgrade.check(
        f"{cluster.path}: images", cluster.name, manifest.slurm, cluster.cell.slurm
    )


def feed(argv: list[str], source: IO[bytes], what: str, bar: tqdm) -> None:
    """Run ``argv`` with ``source`` on its standard input."""
    with tempfile.TemporaryFile() as err, bar:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=err, stderr=err)
        assert proc.stdin is not None
        try:
            for chunk in archive.chunks(source):
                proc.stdin.write(chunk)
                bar.update(len(chunk))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        if proc.wait():
            err.seek(0)
            tail = " / ".join(err.read().decode(errors="replace").strip().splitlines()[-3:])
            raise DeployError(f"restoring {what} failed (exit {proc.returncode}): {tail}")


def feed_member(
    path: Path, manifest: archive.Manifest, member: str, argv: list[str], what: str, log: IO[str]
) -> None:
    """Run ``argv`` with the archive's ``member`` on its standard input (a progress bar)."""
    with archive.member(path, member) as source:
        feed(argv, source, what, bar(member, manifest.members[member]["size"], log))


def load_dump(
    target: BackupAccess, path: Path, manifest: archive.Manifest, tail: Callable[[], str] = str
) -> None:
    """Once the cluster's own database answers: the archive's dump into it, and its job table
    started at the manifest's job_index (a job StateSave holds may have an index the dump lacks:
    new jobs start above it, never on its row). ``tail``: what to show when it never answers."""
    deadline = time.monotonic() + 300
    while target.sh(DATABASE, f"mariadb-admin --socket={DB_SOCKET} ping")[0]:
        if time.monotonic() > deadline:
            raise DeployError(f"{DATABASE} does not answer after 300 s\n{tail()}".rstrip())
        time.sleep(1)
    argv = target.exec_argv(DATABASE, f"mariadb --socket={DB_SOCKET}")
    feed_member(path, manifest, "database.sql", argv, "the accounting database", target.log)
    if manifest.job_index:
        table, start = job_table(target.cluster.name), int(manifest.job_index)
        sql = f"alter table {table} auto_increment = {start}"
        code, out = target.sh(DATABASE, f"mariadb --socket={DB_SOCKET} -e {shlex.quote(sql)}")
        if code:
            raise DeployError(f"{DATABASE}: {sql} failed: {out}")


def before_upgrade(target: BackupAccess) -> None:
    """Slurm's upgrade guide: back up the database and StateSave before a series change."""
    path, _ = backup(target, None)
    print(f"backup before the upgrade: {path} (invoke restore {path})", file=target.log)


class ContainerSource:
    """snapshot.Source through a deploy target: a command in the role's container."""

    db = f"--socket={DB_SOCKET}"
    ROLES: ClassVar = {
        snapshot.STATE: CONTROLLER,
        snapshot.DATABASE: DATABASE,
        snapshot.JAIL: LOGIN,
    }

    def __init__(self, target: BackupAccess) -> None:
        self.target = target

    def sh(self, where: str, command: str) -> tuple[int, str]:
        return self.target.sh(self.ROLES[where], command)

    def argv(self, where: str, command: str) -> list[str]:
        return self.target.exec_argv(self.ROLES[where], command)

    def secret(self, file: str, at: str) -> bytes | None:
        return self.target.secret(roles.SECRETS[file])


def plan(cluster: Cluster, slurm: str | None = None) -> snapshot.Plan:
    """What a backup of ``cluster`` copies (``slurm``: the version it runs, None to ask)."""
    spec = cluster.spec
    secrets, notes = {}, []
    for secret, source in roles.cluster_secrets(spec).items():
        if source is None:
            secrets[secret.file] = secret.path  # where the scheduled pod mounts it
        else:
            notes.append(f"{secret.file} is the site's file {source}: not in the archive")
    if spec.accounting.enabled and spec.accounting.database is not None:
        notes.append(
            f"the accounting database is the site's ({spec.accounting.database.host}): back it "
            "up there"
        )
    return snapshot.Plan(
        cluster=cluster.name,
        slurm=slurm,
        slurmforge=_version(),
        images=dict(cluster.images),
        files={
            cluster.path.name: cluster.path.read_text(),
            "model.json": json.dumps(as_dict(cluster), indent=2) + "\n",
        },
        secrets=secrets,
        state_dir=STATE_DIR,
        jail_root=jail_contract.ROOT,
        jail=[*JAIL_STATE, *(p.strip("/") for p in spec.jail.kept)],
        database=roles.OWN_DB_NAME if roles.own_database(spec) else None,
        notes=notes,
    )


def backup(target: BackupAccess, out: Path | None) -> tuple[Path, list[str]]:
    """Back ``target``'s cluster up into ``out`` (default: default_dir); the archive and the
    summary to show."""
    source = ContainerSource(target)
    log = target.log
    where = out or default_dir(target.cluster.name)
    try:
        return snapshot.Snapshot(
            plan(target.cluster), source, where, lambda what, total: bar(what, total, log)
        ).run()
    except ConfigError as exc:  # slurmctld does not answer
        raise ConfigError(f"--target {target.NAME}: {exc}", hint=exc.hint) from None
