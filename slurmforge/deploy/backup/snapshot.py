"""One consistent copy of a running cluster into an archive (archive.py), made either by
`invoke backup` through the target's way into its containers (take.py) or, on a schedule, by a
pod of the cluster's own that mounts what it copies (pod.py, the k8s CronJob ``backup``). This
module needs nothing beyond Python's standard library, so that the database image can carry it
with pod.py, archive.py and errors.py.

Consistency. The accounting database is dumped first, in one transaction (mariadb-dump --single-
transaction: InnoDB's snapshot, no lock on slurmdbd's writes). slurmctld writes each state file
whole (to ``<file>.new``, then renamed), from a thread that saves a change at most SAVE_MAX_WAIT + 1
= 6 s after its previous save (src/slurmctld/state_save.c). So once job_state has been written after
the dump ended, or that time has passed without a write (then no change was waiting), StateSave
holds everything the dump holds (power saving's node changes are the exception: they wait for the
next full save, so the backup asks for a node save first, request_node_save); it is then copied
without the ``.new`` files. Scheduling never stops and no RPC waits: the copy reads files slurmctld
only ever replaces. A job that changed in the seconds between the dump and the copy is in StateSave
as it was then, and its record in the dump as it was before (a job submitted then has no record:
slurmctld sends again only the jobs it holds without a record index, send_jobs_to_accounting in
job_mgr.c). So that such a job's index is never handed to a new job, the archive records the live
job table's next index after the copy and the restored table starts there. A job that runs at backup
time has no node after a restore: Slurm ends it as it ends a job whose node was lost.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from slurmforge.deploy.backup import archive
from slurmforge.errors import ConfigError, DeployError

SAVE_MAX_WAIT = 5.0  # seconds between two saves of slurmctld's save thread (state_save.c)
# what that thread writes (a trigger's state too, when there are triggers)
STATE_FILES = ("job_state", "node_state", "part_state", "resv_state", "trigger_state")
STATE_TRIES = 5  # copies of StateSave while a save renames its files under tar (Snapshot.state)
# slurmctld asked to save its nodes (request_node_save): its clock, then one node's comment
# written back as it is
SAVE_NODE_STATE = (
    "command -v scontrol > /dev/null || { echo no client; exit 0; }; "
    "node=$(sinfo -h -N -o %N | head -1) && "
    'comment=$(scontrol show node "$node" --json | python3 -c '
    '\'import json, sys; print(json.load(sys.stdin)["nodes"][0].get("comment", ""))\') && '
    'date +%s.%N && scontrol update nodename="$node" comment="$comment"'
)
# Where a Source runs a command: beside StateSave (slurmctld), the database, the jail, the
# embedded directory (slapd), or the web portal's hub.
STATE, DATABASE, JAIL, DIRECTORY, PORTAL = "state", "database", "jail", "directory", "portal"
# the configuration images/slapd/slapd-init writes at each start (slapcat reads it), and the
# member the directory's entries are in
SLAPD_CONF, DIRECTORY_MEMBER = "/run/slapd/slapd.conf", "directory.ldif"
# the hub's database in an archive; the copy SQLite's online backup makes of it beside the hub
# (consistent while the hub runs: every page is copied in one step under a read lock, which a
# write of the hub's waits for), written to standard output
PORTAL_MEMBER = "portal.sqlite"
COPY_SQLITE = (
    "import shutil, sqlite3, sys, tempfile\n"
    "with tempfile.NamedTemporaryFile() as copy:\n"
    "    source, target = sqlite3.connect(sys.argv[1]), sqlite3.connect(copy.name)\n"
    "    source.backup(target)\n"
    "    target.close(); source.close()\n"
    "    with open(copy.name, 'rb') as done:\n"
    "        shutil.copyfileobj(done, sys.stdout.buffer)\n"
)


@dataclass
class Plan:
    """What a backup of one cluster copies, as plain data (a scheduled pod reads it as JSON)."""

    cluster: str
    slurm: str | None  # None: ask slurmctld (scontrol version)
    slurmforge: str
    images: dict[str, str]
    files: dict[str, str]  # cluster/<name> → text: the cluster file and what it resolved to
    secrets: dict[str, str]  # file → where the source reads it (its meaning is the source's)
    state_dir: str  # slurmctld's StateSaveLocation
    jail_root: str
    jail: list[str]  # relative to the jail: its user state (globs allowed)
    database: str | None  # the cluster's own accounting database's name; None: not ours
    notes: list[str] = field(default_factory=list)  # what the archive leaves out, and why
    directory: bool = False  # the cluster's own directory (slapd) is copied
    portal_db: str | None = None  # the web portal hub's database, copied where the hub runs
    standalone: str | None = None  # which of ``files`` a restore writes when given no other

    def dump(self) -> str:
        return json.dumps(self.__dict__, indent=2, sort_keys=True) + "\n"

    @classmethod
    def load(cls, path: Path) -> Plan:
        return cls(**json.loads(path.read_text()))


class Source(Protocol):
    """How a backup reaches the cluster: ``where`` is STATE, DATABASE, JAIL, DIRECTORY or
    PORTAL."""

    # mariadb client options that reach the database (first on the command line)
    db: str

    def sh(self, where: str, command: str) -> tuple[int, str]: ...
    def argv(self, where: str, command: str) -> list[str]: ...
    def secret(self, file: str, at: str) -> bytes | None: ...


def size_text(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def job_table(cluster: str, database: str = "slurm_acct_db") -> str:
    return f"{database}.`{cluster}_job_table`"


class _Exec:
    """``argv``'s standard output read as a stream; ``what`` names it in an error."""

    def __init__(self, what: str, argv: list[str], ok: tuple[int, ...] = (0,)):
        self.what = what
        self.ok = ok
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 (read and closed by chunks())
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.err
        )
        self.code: int | None = None
        self.stderr = ""  # its last lines, once it ended

    def chunks(self, progress: Callable[[int], object] | None = None) -> Iterator[bytes]:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read(archive.CHUNK):
            if progress is not None:
                progress(len(chunk))
            yield chunk
        self.code = self.proc.wait()
        self.err.seek(0)
        lines = self.err.read().decode(errors="replace").strip().splitlines()
        self.err.close()
        self.stderr = " / ".join(lines[-3:])
        if self.code not in self.ok:
            raise DeployError(f"{self.what} failed (exit {self.code}): {self.stderr}")


class Snapshot:
    """One backup of ``plan``'s cluster, reached through ``source``, into ``out``. ``bar(what,
    total)`` makes a progress bar (a context manager with ``update(n)``) or None for none."""

    def __init__(
        self,
        plan: Plan,
        source: Source,
        out: Path,
        bar: Callable[[str, int | None], Any] | None = None,
    ) -> None:
        self.plan = plan
        self.source = source
        self.out = out
        self.make_bar = bar
        self.waited = 0.0  # seconds spent waiting for slurmctld's next state save

    def run(self) -> tuple[Path, list[str]]:
        """The archive and a summary of it (a line each)."""
        plan = self.plan
        slurm = plan.slurm or self.live_slurm()
        archive.clean_partials(self.out)
        # not datetime.UTC (Python 3.11): an image's python3 may be 3.10 (Ubuntu 22.04)
        now = datetime.now(timezone.utc)  # noqa: UP017
        manifest = archive.Manifest(
            cluster=plan.cluster,
            created=now.isoformat(timespec="seconds"),
            slurm=slurm,
            slurmforge=plan.slurmforge,
            images=dict(plan.images),
            notes=list(plan.notes),
            standalone=f"cluster/{plan.standalone}" if plan.standalone else None,
        )
        name = archive.archive_name(plan.cluster, now.strftime("%Y%m%dT%H%M%SZ"))
        start = time.monotonic()
        with archive.Writer(self.out, name, manifest) as writer:
            for member, text in plan.files.items():
                writer.add_bytes(f"cluster/{member}", text.encode(), 0o644)
            for file, at in plan.secrets.items():
                data = self.source.secret(file, at)
                if data is None:
                    raise DeployError(f"cluster {plan.cluster} has no {file} to back up")
                writer.add_bytes(f"secrets/{file}", data, 0o600)
            began = self.database(writer)
            self.directory(writer)
            self.portal(writer)
            self.jail(writer)  # while slurmctld saves what the dump holds (the wait below)
            self.state(writer, began)
            manifest.job_index = self.next_job_index()
            path = writer.commit()
        took = time.monotonic() - start
        lines = [f"backup of cluster {plan.cluster} (Slurm {slurm}) in {took:.1f} s: {path}"]
        width = max([28, *(len(m) for m in manifest.members)])
        for member, info in manifest.members.items():
            lines.append(f"  {member:{width}} {size_text(info['size']):>10}")
        lines.append(f"  {'total':{width}} {size_text(path.stat().st_size):>10}")
        lines += [f"note: {n}" for n in manifest.notes]
        return path, lines

    def live_slurm(self) -> str:
        code, out = self.source.sh(STATE, "scontrol version")
        if code or not out.startswith("slurm "):
            raise ConfigError(
                f"cluster {self.plan.cluster} is not running (slurmctld does not answer: "
                f"{out.strip()[-200:]}): nothing to back up",
                hint="back up where it runs, or start it: invoke deploy",
            )
        return out.split()[-1]

    def stream(self, where: str, command: str, ok: tuple[int, ...] = (0,)) -> _Exec:
        return _Exec(f"{where}: {command}", self.source.argv(where, command), ok)

    def bar(self, what: str, total: int | None = None) -> Any:
        if self.make_bar is None:
            return _NoBar()
        return self.make_bar(what, total)

    def database(self, writer: archive.Writer) -> float:
        """Dump the cluster's own accounting database; returns when the dump had ended (its
        snapshot holds nothing newer)."""
        if self.plan.database is not None:
            dump = self.stream(
                DATABASE,
                f"mariadb-dump {self.source.db} --single-transaction --routines --triggers "
                f"--databases {self.plan.database}",
            )
            with self.bar("database") as bar:
                writer.add("database.sql", dump.chunks(bar.update))
        return time.time()

    def directory(self, writer: archive.Writer) -> None:
        """The embedded directory's entries, every attribute a site added over LDAP included
        (passwords, keys, groups). slapcat reads back-mdb's own snapshot while slapd serves:
        consistent without a stop, and what slapadd loads back."""
        if self.plan.directory:
            dump = self.stream(DIRECTORY, f"slapcat -f {SLAPD_CONF} -o ldif-wrap=no")
            with self.bar("directory") as bar:
                writer.add(DIRECTORY_MEMBER, dump.chunks(bar.update))

    def portal(self, writer: archive.Writer) -> None:
        """The hub's database: its users, their login sessions and API tokens, and which job
        serves each one's notebook server."""
        if self.plan.portal_db:
            command = f"python3 -c {shlex.quote(COPY_SQLITE)} {shlex.quote(self.plan.portal_db)}"
            with self.bar("portal") as bar:
                writer.add(PORTAL_MEMBER, self.stream(PORTAL, command).chunks(bar.update))

    def next_job_index(self) -> int | None:
        """The job table's next index in the live database, read after StateSave was copied."""
        if self.plan.database is None:
            return None
        table = job_table(self.plan.cluster, self.plan.database)
        sql = shlex.quote(f"select coalesce(max(job_db_inx), 0) + 1 from {table}")
        code, out = self.source.sh(DATABASE, f"mariadb {self.source.db} -N -e {sql}")
        if code:
            raise DeployError(f"{DATABASE}: reading the job table's next index failed: {out}")
        return int(out.split()[-1])

    def request_node_save(self) -> float | None:
        """Ask slurmctld to save its nodes now; the time of asking by its own clock, or None
        where this source has no Slurm client (the scheduled pod). Power saving moves a node
        to powered down (and back) without asking for a save: such a change reaches StateSave
        only with slurmctld's full save every 300 s (PERIODIC_CHECKPOINT, slurmctld.h), or when
        something else changes a node. Every update_node RPC asks for one, whatever it updates
        (proc_req.c, 23.11 to 26.05): this rewrites one node's comment as it is."""
        code, out = self.source.sh(STATE, SAVE_NODE_STATE)
        asked = out.splitlines()[0] if out else ""
        if code == 0 and re.fullmatch(r"[0-9.]+", asked):
            return float(asked)
        if code == 0 and asked == "no client":
            return None
        raise DeployError(f"{STATE}: asking slurmctld to save its nodes failed: {out}")

    def wait_for_save(self, after: float, nodes_after: float | None = None) -> None:
        """Until slurmctld has saved its jobs since ``after`` (and its nodes since
        ``nodes_after``), or long enough has passed that it had nothing to save. Its save thread
        (state_save.c) writes a change at once when its last save is SAVE_MAX_WAIT old, else at
        its next wake past that (it wakes each second): a change made before ``after`` is on
        disk by max(after, last save + SAVE_MAX_WAIT + 1). The last save is no later than the
        newest state file's mtime."""
        start = time.monotonic()
        files = " ".join(f"{self.plan.state_dir}/{f}" for f in STATE_FILES)
        deadline = None
        while deadline is None or time.time() < deadline:
            code, out = self.source.sh(STATE, f"stat -c '%n %.9Y' {files} 2>/dev/null")
            found = [re.fullmatch(r"(\S+) ([0-9.]+)", line) for line in out.splitlines()]
            saved = {Path(m[1]).name: float(m[2]) for m in found if m}
            if code not in (0, 1):  # 1: some of the files are not there (yet)
                raise DeployError(f"reading {self.plan.state_dir} failed (exit {code}): {out}")
            nodes_saved = nodes_after is None or saved.get("node_state", 0.0) > nodes_after
            if saved.get("job_state", 0.0) > after and nodes_saved:
                break
            if deadline is None:
                # no file yet: the thread has never saved, and saves the first change at once
                last = max(saved.values(), default=after - SAVE_MAX_WAIT)
                deadline = max(after, nodes_after or 0.0, last + SAVE_MAX_WAIT + 1.0) + 0.5
            time.sleep(0.2)
        self.waited = time.monotonic() - start

    def state(self, writer: archive.Writer, after: float) -> None:
        """StateSave, copied again while tar says a file changed as it read it (a save renamed
        its files: each whole, the set maybe of two saves); after STATE_TRIES, kept, noted."""
        self.wait_for_save(after, self.request_node_save())
        command = f"tar --numeric-owner -C {self.plan.state_dir} --exclude='*.new' -cf - ."
        for attempt in range(1, STATE_TRIES + 1):
            with tempfile.SpooledTemporaryFile(max_size=64 << 20) as held:
                copy = self.stream(STATE, command, ok=(0, 1))
                held.writelines(copy.chunks())
                if copy.code == 1 and attempt < STATE_TRIES:
                    time.sleep(1)
                    continue
                held.seek(0)
                writer.add("state.tar", archive.chunks(held))
                if copy.code == 1:
                    writer.manifest.notes.append(
                        f"StateSave changed while it was read, {STATE_TRIES} times: {copy.stderr}"
                    )
                return

    def jail(self, writer: archive.Writer) -> None:
        root = self.plan.jail_root
        # what exists of the paths (globs expanded by bash), relative to the jail
        listing = " ".join(shlex.quote(p) if "*" not in p else p for p in self.plan.jail)
        command = (
            f"cd {root} && shopt -s nullglob && set -- && "
            f'for p in {listing}; do [[ -e $p ]] && set -- "$@" "$p"; done; '
            'tar --numeric-owner --one-file-system -cf - "$@"'
        )
        code, out = self.source.sh(JAIL, f"cd {root} && du -sbc {listing} 2>/dev/null | tail -1")
        total = int(out.split()[0]) if code in (0, 1) and out.split()[:1] != [] else None
        # exit 1: a file changed while tar read it (a running job writes its home)
        copy = self.stream(JAIL, command, ok=(0, 1))
        with self.bar("jail", total) as bar:
            writer.add("jail.tar", copy.chunks(bar.update))
        if copy.code == 1:
            writer.manifest.notes.append(
                f"files changed in the jail while they were read: {copy.stderr}"
            )


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: int) -> None:
        pass
