"""`invoke backup` and `invoke restore` on the local target: a running cluster into one archive
(archive.py), and an archive back into a cluster on this host, without stopping anything.

Consistency. The accounting database is dumped first, in one transaction (mariadb-dump
--single-transaction: InnoDB's snapshot, no lock on slurmdbd's writes). slurmctld writes each
state file whole (to ``<file>.new``, then renamed), from a thread that saves every change within
SAVE_MAX_WAIT = 5 s (src/slurmctld/state_save.c). So once job_state has been written after the
dump ended, or 6 s have passed without a write (then no change was waiting), StateSave holds
everything the dump holds; it is then copied without the ``.new`` files. Scheduling never stops
and no RPC waits: the copy reads files slurmctld only ever replaces. A job that changed in the
seconds between the dump and the copy is in StateSave as it was then, and its record in the dump
as it was before (a job submitted then has no record: slurmctld sends again only the jobs it
holds without a record index, send_jobs_to_accounting in job_mgr.c). So that such a job's
index is never handed to a new job, the archive records the live job table's next index after
the copy and the restored table starts there. A job that runs at backup time has no node after
a restore: Slurm ends it as it ends a job whose node was lost.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, TYPE_CHECKING

from tqdm import tqdm

from slurmforge import jail_contract, state
from slurmforge.deploy import archive, roles, upgrade
from slurmforge.deploy.model import as_dict
from slurmforge.deploy.roles import CONTROLLER, CONTROLLER_STATE, DATABASE, JAIL, LOGIN
from slurmforge.errors import ConfigError, DeployError

if TYPE_CHECKING:
    from slurmforge.deploy.local_run import Local

STATE_DIR = CONTROLLER_STATE.path
SAVE_MAX_WAIT = 5.0  # seconds: slurmctld saves a change within this (state_save.c)
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
    """``argv`` in a container (`docker exec`), its standard output read as a stream."""

    def __init__(self, container: str, command: str, ok: tuple[int, ...] = (0,)) -> None:
        self.what = f"{container}: {command}"
        self.ok = ok
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 (read and closed by chunks())
        argv = ["docker", "exec", container, "bash", "-c", command]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err)
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


def _bar(what: str, total: int | None, log: IO[str]) -> tqdm:
    return tqdm(total=total, desc=what, unit="B", unit_scale=True, file=log, leave=False,
                disable=None)  # fmt: skip


def _job_table(cluster: str) -> str:
    return f"slurm_acct_db.`{cluster}_job_table`"


def _next_index(cluster: str) -> str:
    return shlex.quote(f"select coalesce(max(job_db_inx), 0) + 1 from {_job_table(cluster)}")


def _feed(argv: list[str], source: IO[bytes], what: str, bar: tqdm) -> None:
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


class Backup:
    """One backup of ``local``'s running cluster into ``out``."""

    def __init__(self, local: Local, out: Path) -> None:
        self.local = local
        self.cluster = local.cluster
        self.out = out
        self.log = local.log
        self.waited = 0.0  # seconds spent waiting for slurmctld's next state save

    def container(self, service: str) -> str:
        found = self.local.running(service)
        if found is None:
            raise DeployError(f"{service} of cluster {self.cluster.name} is not running")
        return found.name

    def run(self) -> tuple[Path, list[str]]:
        local, cluster = self.local, self.cluster
        controller = local.running(CONTROLLER)
        slurm = controller.labels.get("io.slurmforge.slurm", "") if controller else ""
        if not slurm:
            raise ConfigError(
                f"cluster {cluster.name} is not running here (no slurmctld container): nothing "
                "to back up",
                hint="back up on the host that runs it, or start it: invoke deploy",
            )
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
            path = state.cluster_dir(self.cluster.name) / secret.file
            writer.add_bytes(f"secrets/{secret.file}", path.read_bytes(), 0o600)

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
            dump = _Exec(
                self.container(DATABASE),
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
        code, out = self.local.sh(
            DATABASE, f"mariadb --socket={DB_SOCKET} -N -e {_next_index(self.cluster.name)}"
        )
        if code:
            raise DeployError(f"{DATABASE}: reading the job table's next index failed: {out}")
        return int(out.split()[-1])

    def wait_for_save(self, after: float) -> None:
        """Until slurmctld has saved its jobs since ``after``, or long enough has passed that it
        had nothing to save (see the module's docstring)."""
        start = time.monotonic()
        deadline = after + SAVE_MAX_WAIT + 1.0
        while time.time() < deadline:
            code, out = self.local.engine.exec(
                self.local.running(CONTROLLER),  # type: ignore[arg-type]
                ["stat", "-c", "%.9Y", f"{STATE_DIR}/job_state"],
            )
            if code == 0 and float(out.strip() or 0) > after:
                break
            time.sleep(0.2)
        self.waited = time.monotonic() - start

    def state(self, writer: archive.Writer, after: float) -> None:
        container = self.container(CONTROLLER)
        self.wait_for_save(after)
        copy = _Exec(
            container,
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
        container = self.container(LOGIN)
        code, out = self.local.sh(
            LOGIN, f"cd {jail_contract.ROOT} && du -sbc {listing} 2>/dev/null | tail -1"
        )
        total = int(out.split()[0]) if code in (0, 1) and out.split()[:1] != [] else None
        # exit 1: a file changed while tar read it (a running job writes its home)
        copy = _Exec(container, command, ok=(0, 1))
        with self.bar("jail", total) as bar:
            writer.add("jail.tar", copy.chunks(bar))
        if copy.code == 1:
            writer.manifest.notes.append(
                f"files changed in the jail while they were read: {copy.stderr}"
            )

    def bar(self, what: str, total: int | None = None) -> tqdm:
        return _bar(what, total, self.log)


def backup(local: Local, out: Path) -> tuple[Path, list[str]]:
    return Backup(local, out).run()


# -- restore -------------------------------------------------------------------------------------


class Restore:
    """An archive put back into ``local``'s cluster: the secrets before anything starts, the
    jail's user state and StateSave into the new volumes before the jail is populated (populate
    keeps them and merges the accounts), the database loaded before slurmdbd starts."""

    def __init__(self, local: Local, path: Path, manifest: archive.Manifest) -> None:
        self.local = local
        self.path = path
        self.manifest = manifest

    def check(self, force: bool) -> bool:
        """Refuse an archive of another cluster, a Slurm move Slurm cannot make, and a cluster
        that has state here (unless ``force``, which removes it). True: a series change."""
        cluster, manifest = self.local.cluster, self.manifest
        if manifest.cluster != cluster.name:
            raise ConfigError(
                f"{self.path}: holds cluster {manifest.cluster}, but {cluster.path} is cluster "
                f"{cluster.name}",
                hint=f"give --cluster the file of {manifest.cluster} (the archive holds a copy "
                "under cluster/)",
            )
        upgrading = upgrade.check(
            f"{cluster.path}: images", cluster.name, manifest.slurm, cluster.cell.slurm
        )
        self.local.image_ids()  # images that are not built: refused before anything is deleted
        found = self.existing()
        if found and not force:
            raise ConfigError(
                f"cluster {cluster.name} already has state on this host ({', '.join(found)}): a "
                "restore would replace it",
                hint="restore with --force to delete it first, or run: invoke down --volumes",
            )
        if found:
            self.local.remove_everything()
            left = self.existing()
            if left:
                raise DeployError(f"cluster {cluster.name}: could not remove {', '.join(left)}")
        return upgrading

    def bar(self, member: str) -> tqdm:
        return _bar(member, self.manifest.members[member]["size"], self.local.log)

    def existing(self) -> list[str]:
        local = self.local
        found = [f"container {c.name}" for c in local.containers().values()]
        found += [f"volume {v}" for v in local.volumes()]
        directory = state.cluster_dir(local.cluster.name)
        found += [f"secret {p}" for p in sorted(directory.glob("*")) if p.name in roles.SECRETS]
        return found

    def secrets(self) -> None:
        for name in self.manifest.members:
            if name.startswith("secrets/"):
                with archive.member(self.path, name) as source:
                    data = source.read()
                state.ensure_secret(self.local.cluster.name, name.removeprefix("secrets/"),
                                    lambda data=data: data)  # fmt: skip

    def _untar(self, volume: str, member: str) -> None:
        image = self.local.cluster.images[CONTROLLER]
        argv = [
            "docker", "run", "--rm", "-i", "--network", "none", "-v", f"{volume}:/dst",
            "--entrypoint", "tar", image, "--numeric-owner", "-xpf", "-", "-C", "/dst",
        ]  # fmt: skip
        with archive.member(self.path, member) as source:
            bar = self.bar(member)
            _feed(argv, source, f"{member} into volume {volume}", bar)

    def volumes(self) -> None:
        """Into the volumes Compose has just made, before anything runs on them."""
        name = self.local.cluster.name
        self._untar(f"{name}_{CONTROLLER_STATE.local}", "state.tar")
        self._untar(f"{name}_{JAIL}", "jail.tar")

    def database(self) -> None:
        """Start the cluster's own database alone and load the dump into it."""
        if "database.sql" not in self.manifest.members:
            return
        local = self.local
        local.compose("up", "-d", DATABASE)
        deadline = time.monotonic() + 300
        while local.sh(DATABASE, f"mariadb-admin --socket={DB_SOCKET} ping")[0]:
            if time.monotonic() > deadline:
                raise DeployError(f"{DATABASE} did not start\n{local._tail(DATABASE)}")
            time.sleep(1)
        container = local.running(DATABASE)
        assert container is not None
        argv = ["docker", "exec", "-i", container.name, "mariadb", f"--socket={DB_SOCKET}"]
        with archive.member(self.path, "database.sql") as source:
            _feed(argv, source, "the accounting database", self.bar("database.sql"))
        if self.manifest.job_index:
            # a job StateSave holds may have an index the dump lacks (it was submitted between
            # the dump and the copy): new jobs start above it, never on its row
            table = _job_table(local.cluster.name)
            sql = f"alter table {table} auto_increment = {int(self.manifest.job_index)}"
            code, out = local.sh(DATABASE, f"mariadb --socket={DB_SOCKET} -e {shlex.quote(sql)}")
            if code:
                raise DeployError(f"{DATABASE}: {sql} failed: {out}")


def restore(local: Local, path: Path, force: bool, timeout: float) -> list[str]:
    start = time.monotonic()
    manifest = archive.verify(path)
    job = Restore(local, path, manifest)
    upgrading = job.check(force)
    local.check_ports()
    job.secrets()
    local.restoring = job
    try:
        local.start(timeout, upgrading=upgrading)
    finally:
        local.restoring = None
    took = time.monotonic() - start
    return [
        f"restored cluster {manifest.cluster} from {path} (backup of {manifest.created}, Slurm "
        f"{manifest.slurm}) in {took:.1f} s",
        *(f"note: {n}" for n in manifest.notes),
    ]
