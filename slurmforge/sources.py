"""Host-side fetcher: upstream artifacts → content-addressed cache, sha256 verified before use.

Layout: ``.cache/sources/<sha256>/<filename>``. A file is only ever moved into place after its
checksum matched, so anything under a hash directory is trusted without re-hashing.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import netrc
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from tqdm import tqdm

from slurmforge import gitsource, refs
from slurmforge.config import Config
from slurmforge.errors import ChecksumError, ConfigError, PinError, SourceError
from slurmforge.pins import LOCK_PYTHONS, UNPINNED, GitSource, Source, WheelLock
from slurmforge.userspace import Wheel

MIRROR_ENV = "SLURMFORGE_MIRROR"
_CHUNK = 1 << 20
# The platform tags of the wheels NVIDIA publishes, per arch (aarch64 is its 'sbsa')
# Every glibc-based platform tag the images' distros can load (Ubuntu 22.04 has glibc 2.35), per
# arch: what a lock's compiled wheels may be built for ("any" is always accepted besides).
_LOCK_PLATFORMS = {
    arch: (f"manylinux2014_{machine}", *(f"manylinux_2_{v}_{machine}" for v in range(17, 36)))
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64"))
}
_PLATFORMS = {
    "amd64": ("manylinux2014_x86_64", "manylinux1_x86_64"),
    "arm64": ("manylinux2014_aarch64", "manylinux_2_17_aarch64"),
}


def _pip_failed(proc: subprocess.CompletedProcess[str], what: str, pins: str) -> NoReturn:
    """A failed ``pip download``, in one line: a checksum mismatch apart from the rest."""
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    if any("DO NOT MATCH THE HASHES" in ln for ln in lines):
        raise ChecksumError(
            f"{what}: checksum mismatch: a file does not match {pins}",
            hint="check the pinned hashes (pip prints the one it got)",
        )
    detail = next((ln for ln in lines if ln.startswith("ERROR")), lines[-1] if lines else "")
    raise SourceError(f"{what}: pip download failed: {detail or 'no wheel'}")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Fetched:
    source: Source | GitSource | Wheel | WheelLock
    path: Path
    sha256: str


class _NetrcPasswords(urllib.request.HTTPPasswordMgr):
    """Basic-auth credentials from ~/.netrc (or $NETRC), as git and pip read them: a source or
    mirror that needs a login is given none in its URL."""

    def find_user_password(self, realm: str | None, authuri: str) -> tuple[str | None, str | None]:
        host = urllib.parse.urlsplit(authuri if "://" in authuri else f"//{authuri}").hostname
        try:
            found = netrc.netrc().authenticators(host or "")
        except (OSError, netrc.NetrcParseError):
            return None, None
        return (found[0], found[2]) if found else (None, None)


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(_NetrcPasswords()))


def mirror_url(url: str, mirror: str | None) -> str:
    """Rewrite ``url`` onto ``mirror``: ``<mirror>/<host>/<path>`` (a URL or a local directory)."""
    if not mirror:
        return url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        return url
    rel = f"{parts.netloc}{parts.path}"
    if "://" in mirror:
        return f"{mirror.rstrip('/')}/{rel}"
    return Path(mirror, rel).resolve().as_uri()


def resolve_mirror(mirror: str | None) -> str | None:
    """``--mirror``, else ``$SLURMFORGE_MIRROR``; a directory that does not exist is refused."""
    where = "--mirror" if mirror else f"${MIRROR_ENV}"
    mirror = mirror or os.environ.get(MIRROR_ENV) or None
    if mirror and "://" in mirror:
        try:
            refs.url(mirror, ("http", "https", "file"))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}", hint=refs.CREDENTIALS_HINT) from None
    if mirror and "://" not in mirror and not Path(mirror).is_dir():
        raise ConfigError(
            f"{where}: mirror directory {mirror} does not exist",
            hint="give a directory laid out as <host>/<path> (or a URL), or unset it",
        )
    return mirror


@contextlib.contextmanager
def _made_on_failure(path: Path) -> Iterator[None]:
    """Remove, if the block fails, the directories it made on the way to ``path`` (the topmost of
    them did not exist before, so nothing in it is anyone else's)."""
    missing = next((p for p in reversed((path, *path.parents)) if not p.exists()), None)
    try:
        yield
    except BaseException:
        if missing is not None:
            shutil.rmtree(missing, ignore_errors=True)
        raise


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def lookup(self, sha256: str, filename: str) -> Path | None:
        path = self.root / sha256 / filename
        return path if path.is_file() else None

    def fetch(
        self,
        config: Config,
        candidates: Iterable[Source | GitSource | Wheel | WheelLock],
        *,
        mirror: str | None = None,
        allow_unpinned: bool = False,
        trusted: tuple[str, ...] = (),
    ) -> Fetched:
        """Return the first candidate that is cached or downloads with the right checksum. A
        fetch that fails leaves no directory it made."""
        with _made_on_failure(self.root):
            return self._fetch(config, tuple(candidates), mirror, allow_unpinned, trusted)

    def _fetch(
        self,
        config: Config,
        candidates: tuple[Source | GitSource | Wheel | WheelLock, ...],
        mirror: str | None,
        allow_unpinned: bool,
        trusted: tuple[str, ...],
    ) -> Fetched:
        for source in candidates:
            sha = config.sha256_of(source)
            if sha != UNPINNED and (hit := self.lookup(sha, source.filename)):
                return Fetched(source, hit, sha)
        failures: list[str] = []
        refused: list[Source] = []  # unpinned, and neither allowed nor from a trusted origin
        for source in candidates:
            sha = config.sha256_of(source)
            if sha == UNPINNED and not (allow_unpinned or source.url.startswith(trusted)):
                refused.append(source)
                continue
            # A mirror need not hold everything: what it cannot give comes from the origin.
            pip = isinstance(source, Wheel | WheelLock)  # pip's own index, never a mirror
            for where in (mirror, None) if mirror and not pip else (None,):
                try:
                    if isinstance(source, WheelLock):
                        return self._wheelhouse(source)
                    if isinstance(source, Wheel):
                        return self._pip_download(source, sha)
                    if isinstance(source, GitSource):
                        return self._git(source, where)
                    return self._download(source, sha, mirror_url(source.url, where))
                except (ChecksumError, PinError):
                    raise
                except SourceError as exc:
                    failures.append(exc.message)
        if not failures:
            raise ConfigError(
                f"{config.path}: {refused[0].url}: sha256 is '{UNPINNED}'; refusing to use it",
                hint="pass --allow-unpinned, or record it with `invoke lock --trust <origin>`",
            )
        raise SourceError(
            "; ".join(failures),
            hint=f"without access to the origin, set {MIRROR_ENV}=DIR|URL (or --mirror) to a "
            "mirror laid out as <host>/<path> of each source URL",
        )

    def _git(self, source: GitSource, mirror: str | None) -> Fetched:
        """The commit's deterministic tar, cached under the commit ID."""
        final = self.root / source.commit / source.filename
        gitsource.fetch(source, final, self.root, lambda url: mirror_url(url, mirror))
        return Fetched(source, final, source.commit)

    def _pip_download(self, wheel: Wheel, expected: str) -> Fetched:
        """``pip download`` one wheel (no dependencies, Linux on the wheel's arch), then verify it
        like a file.

        pip is the ordinary client for the index (PIP_INDEX_URL and pip.conf apply); it checks the
        pinned hash itself, and the file is checked again before it enters the cache.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".pip-") as tmp:
            req = Path(tmp, "requirements.txt")
            pin = f" --hash=sha256:{expected}" if expected != UNPINNED else ""
            req.write_text(f"{wheel.requirement}{pin}\n")
            out = Path(tmp, "out")
            platforms = [f"--platform={p}" for p in _PLATFORMS[wheel.arch]]
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--disable-pip-version-check", "--only-binary=:all:", "--implementation=py",
                   "--python-version=3", "--abi=none", *platforms,
                   "--dest", str(out), "-r", str(req)]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            got = sorted(out.glob("*.whl")) if out.is_dir() else []
            if proc.returncode != 0 or len(got) != 1:
                _pip_failed(proc, wheel.url, f"the pinned sha256 {expected}")
            actual = _file_sha256(got[0])
            if expected != UNPINNED and actual != expected:
                raise ChecksumError(
                    f"{wheel.url}: checksum mismatch: expected {expected}, got {actual}"
                )
            final = self.root / actual / wheel.filename
            final.parent.mkdir(parents=True, exist_ok=True)
            got[0].replace(final)
            return Fetched(wheel, final, actual)

    def _wheelhouse(self, lock: WheelLock) -> Fetched:
        """Every file of a lock for its arch and each of the images' Pythons, ``pip download``ed
        (pip checks each against the lock's hashes), in one archive with the lock beside them as
        ``requirements.lock``; the archive is written the same way every time."""
        path = lock.path
        text = path.read_bytes()
        if hashlib.sha256(text).hexdigest() != lock.lock_sha256:
            raise ChecksumError(f"{path}: changed while it was read; run the command again")
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".pip-") as tmp:
            out = Path(tmp, "wheels")
            platforms = [f"--platform={p}" for p in _LOCK_PLATFORMS[lock.arch]]
            for python in LOCK_PYTHONS:
                cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                       "--require-hashes", "--disable-pip-version-check", "--only-binary=:all:",
                       "--implementation=cp", f"--python-version={python}", *platforms,
                       "--dest", str(out), "-r", str(path)]  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    _pip_failed(proc, f"{path} (Python {python}, {lock.arch})", "the lock's")
            (out / "requirements.lock").write_bytes(text)
            archive = Path(tmp, lock.filename)
            with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
                for file in sorted(out.iterdir()):
                    info = tarfile.TarInfo(file.name)
                    info.size, info.mode, info.mtime = file.stat().st_size, 0o644, 0
                    with file.open("rb") as fh:
                        tar.addfile(info, fh)
            final = self.root / lock.sha256 / lock.filename
            final.parent.mkdir(parents=True, exist_ok=True)
            archive.replace(final)
            return Fetched(lock, final, lock.sha256)

    def _download(self, source: Source, expected: str, url: str) -> Fetched:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=self.root, prefix=".part-")
        except OSError as exc:
            raise SourceError(f"cannot write to the source cache {self.root}: {exc}") from None
        tmp = Path(tmp_name)
        digest = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    response = _opener().open(url, timeout=60)
                except urllib.error.HTTPError as exc:
                    raise SourceError(f"{url}: HTTP {exc.code} {exc.reason}") from None
                except (urllib.error.URLError, OSError) as exc:
                    reason = getattr(exc, "reason", exc)
                    raise SourceError(f"{url}: {reason}") from None
                with response:
                    length = response.headers.get("Content-Length")
                    total = int(length) if length and length.isdigit() else None
                    received = 0
                    with tqdm(
                        total=total,
                        unit="B",
                        unit_scale=True,
                        desc=source.filename,
                        file=sys.stderr,
                        disable=None,
                        leave=False,
                    ) as bar:
                        while True:
                            try:
                                chunk = response.read(_CHUNK)
                            except (OSError, ValueError, http.client.HTTPException) as exc:
                                raise SourceError(f"{url}: transfer failed: {exc}") from None
                            if not chunk:
                                break
                            out.write(chunk)
                            digest.update(chunk)
                            received += len(chunk)
                            bar.update(len(chunk))
                if total is not None and received != total:
                    raise SourceError(f"{url}: truncated transfer: got {received} of {total} bytes")
            actual = digest.hexdigest()
            if expected != UNPINNED and actual != expected:
                raise ChecksumError(
                    f"{url}: checksum mismatch: expected sha256 {expected}, got {actual}",
                    hint="the download was deleted; check the URL/mirror or the pinned sha256",
                )
            final = self.root / actual / source.filename
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp.replace(final)
            return Fetched(source, final, actual)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
