"""What both targets' restores share: an archive admitted for a cluster, a member streamed into
a container, the accounting dump loaded, the archive's own cluster file unpacked for a restore
given none, and which of the directory and the portal's database a cluster takes back."""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

import yaml
from tqdm import tqdm

from slurmforge import state
from slurmforge.deploy.backup import archive, snapshot
from slurmforge.deploy.backup.snapshot import job_table
from slurmforge.deploy.backup.take import DB_SOCKET, bar
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.roles import DATABASE
from slurmforge.deploy.slurm import upgrade
from slurmforge.errors import ConfigError, DeployError

if TYPE_CHECKING:
    from slurmforge.deploy.backup.access import BackupAccess
    from slurmforge.deploy.spec.model import Cluster

# the embedded directory's entries in an archive, and the file a restore leaves in slapd's data
# volume for images/slapd/slapd-init to load in place of the seed
DIRECTORY_MEMBER, DIRECTORY_RESTORE = snapshot.DIRECTORY_MEMBER, "restore.ldif"
PORTAL_MEMBER = snapshot.PORTAL_MEMBER


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


RESTORED = "cluster"  # under the cluster's state directory: its file, as the archive holds it


def unpack_cluster(path: Path) -> Path:
    """For a restore given no cluster file: the archive's own (take.standalone) and the seed
    it names, written into the cluster's state directory (0700, beside its secrets); the
    file's path. A file there that differs from the archive's is refused, never replaced."""
    manifest = archive.verify(path)
    member = manifest.standalone
    if member is None or member not in manifest.members:
        raise ConfigError(
            f"{path}: the archive holds no cluster file a restore can use alone (a backup "
            "before slurmforge kept one)",
            hint=f"extract cluster/ from it (tar -xf {path} cluster/) and give --cluster",
        )
    if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", manifest.cluster):  # the cluster file's rule
        raise ConfigError(f"{path}: {archive.MANIFEST} names cluster {manifest.cluster!r}")
    directory = state.cluster_dir(manifest.cluster) / RESTORED
    text = _member_text(path, manifest, member)
    wanted = {f"{manifest.cluster}.yaml": text}
    seed = _seed_of(path, member, text)
    if seed is not None:
        wanted[seed] = _member_text(path, manifest, f"cluster/{seed}")
    for name, content in wanted.items():
        file = directory / name
        if file.exists() and file.read_text() != content:
            raise ConfigError(
                f"{file}: differs from the cluster file in {path.name} (an earlier restore's, "
                "since changed?)",
                hint=f"restore with --cluster {file}, or move it away",
            )
    directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # it holds the secrets
    directory.mkdir(exist_ok=True, mode=0o700)
    for name, content in wanted.items():
        state.write_private(directory / name, content.encode())
    return directory / f"{manifest.cluster}.yaml"


def _seed_of(path: Path, member: str, text: str) -> str | None:
    """The seed the archive's cluster file names (take.standalone writes a plain name)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: {member} is not a cluster file (a YAML mapping)")
    for key in ("identity", "ldap", "seed"):
        data = data.get(key) if isinstance(data, dict) else None
    return None if data is None else str(data)


def _member_text(path: Path, manifest: archive.Manifest, member: str) -> str:
    """A cluster/ member's text (one the archive holds, and named as its layout names one)."""
    if (
        archive.layout_error(member)
        or not member.startswith("cluster/")
        or (member not in manifest.members)
    ):
        raise ConfigError(f"{path}: the archive's cluster file names {member!r}, which it lacks")
    with archive.member(path, member) as source:
        try:
            return source.read().decode()
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: {member} is not UTF-8 text") from None


def restores_directory(cluster: Cluster, manifest: archive.Manifest) -> bool:
    """The archive's directory goes into ``cluster``'s own slapd (one that has none: a note
    says the archive's is left out)."""
    if DIRECTORY_MEMBER not in manifest.members:
        return False
    if not sssd.embedded(cluster.spec):
        note = (
            f"the archive's directory is not restored: {cluster.path} has no embedded one "
            "(identity.ldap.embedded)"
        )
        if note not in manifest.notes:
            manifest.notes.append(note)
        return False
    return True


def restores_portal(cluster: Cluster, manifest: archive.Manifest) -> bool:
    """The archive's hub database goes into ``cluster``'s portal (a cluster without one: a note
    says it is left out)."""
    if PORTAL_MEMBER not in manifest.members:
        return False
    if not cluster.spec.portal.enabled:
        note = f"the archive's portal database is not restored: {cluster.path} has no portal"
        if note not in manifest.notes:
            manifest.notes.append(note)
        return False
    return True
