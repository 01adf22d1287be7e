"""`invoke backup` on either target: a running cluster into one archive (archive.py) without
stopping anything, through the target's own way into its containers (`Target.exec_argv`).

Consistency. The accounting database is dumped first, in one transaction (mariadb-dump --single-
transaction: InnoDB's snapshot, no lock on slurmdbd's writes). slurmctld writes each state file
whole (to ``<file>.new``, then renamed), from a thread that saves a change at most SAVE_MAX_WAIT +
1 = 6 s after its previous save (src/slurmctld/state_save.c). So once job_state has been written
after the dump ended, or that time has passed without a write (then no change was waiting),
StateSave holds everything the dump holds; it is then copied without the ``.new`` files. Scheduling
never stops and no RPC waits: the copy reads files slurmctld only ever replaces. A job that changed
in the seconds between the dump and the copy is in StateSave as it was then, and its record in the
dump as it was before (a job submitted then has no record: slurmctld sends again only the jobs it
holds without a record index, send_jobs_to_accounting in job_mgr.c). So that such a job's index is
never handed to a new job, the archive records the live job table's next index after the copy and
the restored table starts there. A job that runs at backup time has no node after a restore: Slurm
ends it as it ends a job whose node was lost.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, TYPE_CHECKING

from tqdm import tqdm

from slurmforge import jail_contract, state
from slurmforge.deploy import archive, roles, upgrade
from slurmforge.deploy.model import as_dict
from slurmforge.deploy.roles import CONTROLLER, CONTROLLER_STATE, DATABASE, LOGIN
from slurmforge.errors import ConfigError, DeployError

if TYPE_CHECKING:
    from slurmforge.deploy import Target
    from slurmforge.deploy.model import Cluster

STATE_DIR = CONTROLLER_STATE.path
SAVE_MAX_WAIT = 5.0  # seconds between two saves of slurmctld's save thread (state_save.c)
# what that thread writes (a trigger's state too, when there are triggers)
STATE_FILES = ("job_state", "node_state", "part_state", "resv_state", "trigger_state")
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


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


class _Exec:
    """``command`` in a role's container (``argv`` runs it there), its standard output read as a
    stream."""

    def __init__(self, role: str, command: str, argv: list[str], ok: tuple[int, ...] = (0,)):
        self.what = f"{role}: {command}"
        self.ok = ok
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 (read and closed by chunks())
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.err
        )
        self.code: int | None = None
        self.stderr = ""  # its last lines, once it ended

    def chunks(self, bar: tqdm | None = None) -> Iterator[bytes]:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read(archive.CHUNK):
            if bar is not None:
                bar.update(len(chunk))
            yield chunk
        self.code = self.proc.wait()
        self.err.seek(0)
        lines = self.err.read().decode(errors="replace").strip().splitlines()
        self.err.close()
        self.stderr = " / ".join(lines[-3:])
        if self.code not in self.ok:
            raise DeployError(f"{self.what} failed (exit {self.code}): {self.stderr}")


def bar(what: str, total: int | None, log: IO[str]) -> tqdm:
    return tqdm(total=total, desc=what, unit="B", unit_scale=True, file=log, leave=False,
                disable=None)  # fmt: skip


def job_table(cluster: str) -> str:
    return f"slurm_acct_db.`{cluster}_job_table`"


def _next_index(cluster: str) -> str:
    return shlex.quote(f"select coalesce(max(job_db_inx), 0) + 1 from {job_table(cluster)}")


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
    target: Target, path: Path, manifest: archive.Manifest, tail: Callable[[], str] = str
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


def before_upgrade(target: Target) -> None:
    """Slurm's upgrade guide: back up the database and StateSave before a series change."""
    path, _ = backup(target, None)
    print(f"backup before the upgrade: {path} (invoke restore {path})", file=target.log)


class Backup:
    """One backup of ``target``'s running cluster into ``out``."""

    def __init__(self, target: Target, out: Path) -> None:
        self.target = target
        self.cluster = target.cluster
        self.out = out
        self.log = target.log
        self.waited = 0.0  # seconds spent waiting for slurmctld's next state save

    def stream(self, role: str, command: str, ok: tuple[int, ...] = (0,)) -> _Exec:
        return _Exec(role, command, self.target.exec_argv(role, command), ok)

    def run(self) -> tuple[Path, list[str]]:
        cluster = self.cluster
        code, out = self.target.sh(CONTROLLER, "scontrol version")
        if code or not out.startswith("slurm "):
            raise ConfigError(
                f"cluster {cluster.name} is not running on --target {self.target.NAME} "
                f"(slurmctld does not answer: {out.strip()[-200:]}): nothing to back up",
                hint="back up where it runs, or start it: invoke deploy",
            )
        slurm = out.split()[-1]
        archive.clean_partials(self.out)
        now = datetime.now(UTC)
        manifest = archive.Manifest(
            cluster=cluster.name,
            created=now.isoformat(timespec="seconds"),
            slurm=slurm,
            slurmforge=_version(),
            images=dict(cluster.images),
        )
        name = archive.archive_name(cluster.name, now.strftime("%Y%m%dT%H%M%SZ"))
        start = time.monotonic()
        with archive.Writer(self.out, name, manifest) as writer:
            writer.add_bytes(f"cluster/{cluster.path.name}", cluster.path.read_bytes(), 0o644)
            model = json.dumps(as_dict(cluster), indent=2) + "\n"
            writer.add_bytes("cluster/model.json", model.encode(), 0o644)
            self.secrets(writer)
            began = self.database(writer)
            self.jail(writer)  # while slurmctld saves what the dump holds (the wait below)
            self.state(writer, began)
            manifest.job_index = self.next_job_index()
            path = writer.commit()
        took = time.monotonic() - start
        lines = [f"backup of cluster {cluster.name} (Slurm {slurm}) in {took:.1f} s: {path}"]
        for member, info in manifest.members.items():
            lines.append(f"  {member:28} {_size(info['size']):>10}")
        lines.append(f"  {'total':28} {_size(path.stat().st_size):>10}")
        lines += [f"note: {n}" for n in manifest.notes]
        return path, lines

    def secrets(self, writer: archive.Writer) -> None:
        for secret, source in roles.cluster_secrets(self.cluster.spec).items():
            if source is not None:
                writer.manifest.notes.append(
                    f"{secret.file} is the site's file {source}: not in the archive"
                )
                continue
            data = self.target.secret(secret)
            if data is None:
                raise DeployError(f"cluster {self.cluster.name} has no {secret.file} to back up")
            writer.add_bytes(f"secrets/{secret.file}", data, 0o600)

    def database(self, writer: archive.Writer) -> float:
        """Dump the cluster's own accounting database; returns when the dump had ended (its
        snapshot holds nothing newer)."""
        spec = self.cluster.spec
        if spec.accounting.enabled and spec.accounting.database is not None:
            writer.manifest.notes.append(
                f"the accounting database is the site's ({spec.accounting.database.host}): back "
                "it up there"
            )
        elif spec.accounting.enabled:
            dump = self.stream(
                DATABASE,
                f"mariadb-dump --socket={DB_SOCKET} --single-transaction --routines --triggers "
                "--databases slurm_acct_db",
            )
            with self.bar("database") as bar:
                writer.add("database.sql", dump.chunks(bar))
        return time.time()

    def next_job_index(self) -> int | None:
        """The job table's next index in the live database, read after StateSave was copied."""
        spec = self.cluster.spec
        if not spec.accounting.enabled or spec.accounting.database is not None:
            return None
        code, out = self.target.sh(
            DATABASE, f"mariadb --socket={DB_SOCKET} -N -e {_next_index(self.cluster.name)}"
        )
        if code:
            raise DeployError(f"{DATABASE}: reading the job table's next index failed: {out}")
        return int(out.split()[-1])

    def wait_for_save(self, after: float) -> None:
        """Until slurmctld has saved its jobs since ``after``, or long enough has passed that it
        had nothing to save. Its save thread (state_save.c) writes a change at once when its
        last save is SAVE_MAX_WAIT old, else at its next wake past that (it wakes each second):
        a change made before ``after`` is on disk by max(after, last save + SAVE_MAX_WAIT + 1).
        The last save is no later than the newest state file's mtime."""
        start = time.monotonic()
        files = " ".join(f"{STATE_DIR}/{f}" for f in STATE_FILES)
        deadline = None
        while deadline is None or time.time() < deadline:
            code, out = self.target.sh(CONTROLLER, f"stat -c '%n %.9Y' {files} 2>/dev/null")
            found = [re.fullmatch(r"(\S+) ([0-9.]+)", line) for line in out.splitlines()]
            saved = {Path(m[1]).name: float(m[2]) for m in found if m}
            if code not in (0, 1):  # 1: some of the files are not there (yet)
                raise DeployError(f"{CONTROLLER}: reading {STATE_DIR} failed (exit {code}): {out}")
            if saved.get("job_state", 0.0) > after:
                break
            if deadline is None:
                # no file yet: the thread has never saved, and saves the first change at once
                last = max(saved.values(), default=after - SAVE_MAX_WAIT)
                deadline = max(after, last + SAVE_MAX_WAIT + 1.0) + 0.5
            time.sleep(0.2)
        self.waited = time.monotonic() - start

    def state(self, writer: archive.Writer, after: float) -> None:
        self.wait_for_save(after)
        copy = self.stream(
            CONTROLLER,
            f"tar --numeric-owner -C {STATE_DIR} --exclude='*.new' -cf - .",
        )
        writer.add("state.tar", copy.chunks())

    def jail(self, writer: archive.Writer) -> None:
        paths = [*JAIL_STATE, *(p.strip("/") for p in self.cluster.spec.jail.kept)]
        # what exists of them (globs expanded by bash), relative to the jail
        listing = " ".join(shlex.quote(p) if "*" not in p else p for p in paths)
        command = (
            f"cd {jail_contract.ROOT} && shopt -s nullglob && set -- && "
            f'for p in {listing}; do [[ -e $p ]] && set -- "$@" "$p"; done; '
            'tar --numeric-owner --one-file-system -cf - "$@"'
        )
        code, out = self.target.sh(
            LOGIN, f"cd {jail_contract.ROOT} && du -sbc {listing} 2>/dev/null | tail -1"
        )
        total = int(out.split()[0]) if code in (0, 1) and out.split()[:1] != [] else None
        # exit 1: a file changed while tar read it (a running job writes its home)
        copy = self.stream(LOGIN, command, ok=(0, 1))
        with self.bar("jail", total) as bar:
            writer.add("jail.tar", copy.chunks(bar))
        if copy.code == 1:
            writer.manifest.notes.append(
                f"files changed in the jail while they were read: {copy.stderr}"
            )

    def bar(self, what: str, total: int | None = None) -> tqdm:
        return bar(what, total, self.log)


def backup(target: Target, out: Path | None) -> tuple[Path, list[str]]:
    """Back ``target``'s cluster up into ``out`` (default: default_dir); the archive and the
    summary to show."""
    return Backup(target, out or default_dir(target.cluster.name)).run()
