"""A cluster's backup archive: one tar file, written atomically, checked whole before any use.

Layout (every member a plain file):

| member | what |
| --- | --- |
| cluster/<file> | the cluster file as it was; model.json, what it resolved to; one a restore |
| | can use alone (<name>.standalone.yaml: take.standalone); the directory's seed |
| secrets/<file> | the secrets slurmforge made for the cluster (mode 0600) |
| database.sql | the accounting database (mariadb-dump --single-transaction), own database only |
| directory.ldif | the embedded directory's entries (slapcat), when the cluster has one |
| portal.sqlite | the web portal hub's database (SQLite's online backup), when it has a portal |
| state.tar | slurmctld's StateSaveLocation |
| jail.tar | the jail's user state: homes, /opt/user, kept paths, accounts, SSH host keys |
| MANIFEST.json | the versions and each member's size and sha256 |
| MANIFEST.sha256 | the sha256 of MANIFEST.json |

The members are streamed into the file as they are read from the cluster (a header is written
with size 0, then patched once the member's size is known: no member is staged on disk). The file
is created 0600 under a hidden ``.<name>.partial`` name and renamed to its own name only after the
manifest, its checksum and the end of the archive are on disk: a backup stopped at any point
leaves no file that looks complete, and one that was cut short or changed is refused by
``verify``, which reads every byte before a restore starts anything.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from slurmforge.errors import ConfigError

SCHEMA = 1  # the layout above; raised when a restore could not read an older archive
MANIFEST, MANIFEST_SUM = "MANIFEST.json", "MANIFEST.sha256"
TOP_MEMBERS = (
    "database.sql", "directory.ldif", "portal.sqlite", "state.tar", "jail.tar", MANIFEST,
    MANIFEST_SUM,
)  # fmt: skip
FOLDERS = ("cluster", "secrets")  # each holds plain files, one level deep
PARTIAL = ".partial"
BLOCK = tarfile.BLOCKSIZE
CHUNK = 1 << 20


@dataclass
class Manifest:
    cluster: str
    created: str  # UTC, ISO 8601
    slurm: str  # the version slurmctld ran
    slurmforge: str
    images: dict[str, str]  # component → image ref of the cluster at backup time
    members: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → size, sha256
    notes: list[str] = field(default_factory=list)  # what the archive does not hold, and why
    # the live database's next job record index once StateSave was copied (restore starts the
    # restored table there, so no new job takes an index a job in StateSave already holds)
    job_index: int | None = None
    # the cluster/ member a restore given no cluster file writes and uses (take.standalone)
    standalone: str | None = None
    schema: int = SCHEMA

    def dump(self) -> bytes:
        return (json.dumps(self.__dict__, indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def load(cls, where: str, data: bytes) -> Manifest:
        try:
            raw = json.loads(data)
            if raw.get("schema") != SCHEMA:
                raise ConfigError(
                    f"{where}: archive schema {raw.get('schema')!r}; this slurmforge reads "
                    f"schema {SCHEMA}"
                )
            return cls(**raw)
        except (ValueError, TypeError, AttributeError):
            raise ConfigError(f"{where}: {MANIFEST} is not a slurmforge manifest") from None


def layout_error(name: object) -> str | None:
    """Why ``name`` is no member the layout above has; None when it is one. Nothing else is
    ever read from an archive or written out of one: no absolute path, no "..", no folder of
    its own, whatever a manifest says."""
    if name in TOP_MEMBERS:
        return None
    if isinstance(name, str):
        folder, _, file = name.partition("/")
        plain = file not in ("", ".", "..") and file.isprintable() and not set(file) & {"/", "\\"}
        if folder in FOLDERS and plain:
            return None
    return (
        f"member {name!r} is not one of the archive's layout ("
        f"{', '.join(f'{f}/<file>' for f in FOLDERS)}, {', '.join(TOP_MEMBERS)})"
    )


def _header(name: str, size: int, mode: int) -> bytes:
    """A member's tar header, exactly as the writer makes it (verify compares it byte for byte)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, 0
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "strict")


def _sum_line(manifest: bytes) -> bytes:
    """MANIFEST_SUM's content, as sha256sum writes it (`sha256sum -c MANIFEST.sha256` checks)."""
    return f"{hashlib.sha256(manifest).hexdigest()}  {MANIFEST}\n".encode()


def archive_name(cluster: str, stamp: str) -> str:
    return f"slurmforge-{cluster}-{stamp}.tar"


class Writer:
    """Members appended to ``directory/.<name>.partial``; ``commit`` writes the manifest and
    renames the file to ``directory/<name>``. Leaving the ``with`` block without ``commit``
    removes the partial file."""

    def __init__(self, directory: Path, name: str, manifest: Manifest) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = directory / name
        self.partial = directory / f".{name}{PARTIAL}"
        self.manifest = manifest
        self.partial.unlink(missing_ok=True)
        fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self.fh: IO[bytes] = os.fdopen(fd, "w+b")
        self.done = False

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.done:
            self.fh.close()
            self.partial.unlink(missing_ok=True)

    def add(self, name: str, chunks: Iterable[bytes], mode: int = 0o600) -> int:
        """Append a member made of ``chunks``; its size."""
        if len(name.encode()) >= 100 or name in self.manifest.members or layout_error(name):
            raise ValueError(f"member name {name!r}")
        start = self.fh.tell()
        self.fh.write(_header(name, 0, mode))  # patched below, once the size is known
        digest, size = hashlib.sha256(), 0
        for chunk in chunks:
            self.fh.write(chunk)
            digest.update(chunk)
            size += len(chunk)
        self.fh.write(b"\0" * (-size % BLOCK))
        end = self.fh.tell()
        self.fh.seek(start)
        self.fh.write(_header(name, size, mode))
        self.fh.seek(end)
        self.manifest.members[name] = {"size": size, "sha256": digest.hexdigest()}
        return size

    def add_bytes(self, name: str, data: bytes, mode: int = 0o600) -> int:
        return self.add(name, [data], mode)

    def commit(self) -> Path:
        """Write the manifest and its checksum, end the archive, and give it its name."""
        data = self.manifest.dump()
        members = dict(self.manifest.members)
        self.add_bytes(MANIFEST, data, 0o644)
        self.add_bytes(MANIFEST_SUM, _sum_line(data))
        self.manifest.members = members
        self.fh.write(b"\0" * (2 * BLOCK))
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        os.replace(self.partial, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        self.done = True
        return self.path


def clean_partials(directory: Path) -> list[Path]:
    """Remove what backups stopped half-way left in ``directory`` (only our own partial files)."""
    removed = []
    if directory.is_dir():
        for path in directory.glob(f".slurmforge-*.tar{PARTIAL}"):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def prune(directory: Path, cluster: str, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` archives of ``cluster`` in ``directory`` (by the time
    in their names; only names a backup gives); the removed ones."""
    stamp = "[0-9]" * 8 + "T" + "[0-9]" * 6 + "Z"
    found = sorted(directory.glob(archive_name(cluster, stamp)), reverse=True)
    for path in found[keep:]:
        path.unlink(missing_ok=True)
    return found[keep:]


def _refuse(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path}: {why}; not a complete slurmforge backup, nothing was restored")


# archives this process has read whole, by what identifies the file unchanged since then
_verified: dict[tuple[str, int, int, int], Manifest] = {}


def verify(path: Path) -> Manifest:
    """Read the whole archive: every member's size and sha256 as the manifest says, the manifest
    as its checksum says, nothing missing and nothing more. The manifest, or one error line.
    (A second call on the same unchanged file, as a restore that first took the cluster file
    from it makes, answers without reading it again.)"""
    if not path.is_file():
        raise ConfigError(f"{path}: no such archive")
    st = path.stat()
    key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _verified:
        _verified[key] = _verify(path)
    return copy.deepcopy(_verified[key])


def _verify(path: Path) -> Manifest:
    seen: dict[str, dict[str, Any]] = {}
    manifest_data = manifest_sum = None
    try:
        with tarfile.open(path, "r:") as tar, path.open("rb") as raw:
            for info in tar:
                why = layout_error(info.name)
                if why:
                    raise _refuse(path, why)
                raw.seek(info.offset)
                if (
                    not info.isfile()
                    or info.name in seen
                    or raw.read(BLOCK) != _header(info.name, info.size, info.mode)
                ):
                    raise _refuse(path, f"unexpected member header {info.name!r}")
                source = tar.extractfile(info)
                assert source is not None
                digest, size = hashlib.sha256(), 0
                keep = info.name in (MANIFEST, MANIFEST_SUM)
                kept = io.BytesIO()
                while chunk := source.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    if keep:
                        kept.write(chunk)
                if size != info.size:
                    raise _refuse(path, f"{info.name} is cut short")
                raw.seek(info.offset_data + size)
                if raw.read(-size % BLOCK).strip(b"\0"):
                    raise _refuse(path, f"the padding after {info.name} is not zero")
                seen[info.name] = {"size": size, "sha256": digest.hexdigest()}
                if info.name == MANIFEST:
                    manifest_data = kept.getvalue()
                elif info.name == MANIFEST_SUM:
                    manifest_sum = kept.getvalue()
            raw.seek(tar.offset)  # where the last member ends: the end-of-archive blocks follow
            tail = raw.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise _refuse(path, f"unreadable ({exc})") from None
    if len(tail) < 2 * BLOCK or tail.strip(b"\0"):
        raise _refuse(path, "its end-of-archive blocks are missing or not zero (a cut archive)")
    if manifest_data is None or manifest_sum is None:
        raise _refuse(path, f"no {MANIFEST} (a backup that did not finish, or a cut archive)")
    if manifest_sum != _sum_line(manifest_data):
        raise _refuse(path, f"{MANIFEST} does not match {MANIFEST_SUM}")
    manifest = Manifest.load(str(path), manifest_data)
    if not isinstance(manifest.members, dict):
        raise _refuse(path, f"{MANIFEST} lists no members")
    for name in manifest.members:
        why = layout_error(name)
        if why or name in (MANIFEST, MANIFEST_SUM):
            raise _refuse(path, f"{MANIFEST} lists {why or f'member {name!r} as its own'}")
    found = {k: v for k, v in seen.items() if k not in (MANIFEST, MANIFEST_SUM)}
    for name, want in manifest.members.items():
        got = found.get(name)
        if got is None:
            raise _refuse(path, f"member {name} is missing")
        if got != want:
            raise _refuse(path, f"member {name} does not match its sha256 in {MANIFEST}")
    extra = sorted(set(found) - set(manifest.members))
    if extra:
        raise _refuse(path, f"member {extra[0]} is not in {MANIFEST}")
    return manifest


@contextlib.contextmanager
def member(path: Path, name: str) -> Iterator[IO[bytes]]:
    """A member of a verified archive, to read as a stream."""
    with tarfile.open(path, "r:") as tar:
        source = tar.extractfile(name)
        if source is None:
            raise ConfigError(f"{path}: member {name} is not a file")
        yield source


def chunks(source: IO[bytes]) -> Iterator[bytes]:
    while chunk := source.read(CHUNK):
        yield chunk
