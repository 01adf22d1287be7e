"""Git sources pinned by commit → one deterministic tar in the content-addressed cache.

The commit ID is what is trusted: the tag is checked against it (a moved tag is refused, naming
both IDs), the superproject and every submodule are fetched shallow *by commit* with the real git
client, and git itself verifies that the objects it received hash to those IDs. Submodules are
pinned by the superproject's gitlinks and fetched from their own URLs, through the same mirror
mapping as everything else. The tar has fixed owners, modes from git and one mtime (the
superproject's commit time), so the same commit always gives the same bytes.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from slurmforge.errors import PinError, SourceError
from slurmforge.pins import GitSource

_GITLINK = "160000"
# No prompts, no user or system configuration: the fetch means the same on every machine.
_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ASKPASS": "true",
}


@dataclass(frozen=True)
class Submodule:
    path: str  # inside the superproject
    url: str  # as .gitmodules gives it (relative URLs resolved against the superproject's)
    commit: str  # the superproject's gitlink


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_ENV}
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise SourceError("git is not installed", hint="apt-get install git") from None


def _why(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (fatal or lines or [f"git exited with {proc.returncode}"])[-1]


def remote_tag(url: str, tag: str) -> str | None:
    """The commit ``tag`` names at ``url`` now (peeled, for annotated tags), or None."""
    proc = _git(["ls-remote", "--tags", url, f"refs/tags/{tag}", f"refs/tags/{tag}^{{}}"])
    if proc.returncode != 0:
        raise SourceError(f"{url}: cannot list tags: {_why(proc)}")
    refs = dict(reversed(line.split("\t", 1)) for line in proc.stdout.splitlines() if "\t" in line)
    return refs.get(f"refs/tags/{tag}^{{}}") or refs.get(f"refs/tags/{tag}")


def _fetch_commit(repo: Path, url: str, commit: str, what: str) -> None:
    proc = _git(["fetch", "--quiet", "--depth", "1", "--no-tags", url, commit], cwd=repo)
    if proc.returncode != 0:
        why = _why(proc)
        # A local mirror answers the same every time; so does a server that lacks the commit.
        if url.startswith("file://") or "not our ref" in why or "couldn't find remote ref" in why:
            raise PinError(f"{what}: commit {commit} is not served by {url}: {why}")
        raise SourceError(f"{what}: cannot fetch commit {commit} from {url}: {why}")
    got = _git(["rev-parse", "--verify", f"{commit}^{{commit}}"], cwd=repo)
    if got.returncode != 0 or got.stdout.strip() != commit:
        raise PinError(f"{what}: {url} did not deliver commit {commit}")


def submodules(repo: Path, commit: str, super_url: str) -> list[Submodule]:
    """The gitlinks of ``commit`` with their URLs from its .gitmodules (sorted by path)."""
    tree = _git(["ls-tree", "-r", "-z", commit], cwd=repo)
    if tree.returncode != 0:
        raise SourceError(f"{super_url}: cannot read the tree of {commit}: {_why(tree)}")
    links: dict[str, str] = {}
    for entry in filter(None, tree.stdout.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, _, sha = meta.split()
        if mode == _GITLINK:
            links[path] = sha
    if not links:
        return []
    cfg = _git(["config", "--blob", f"{commit}:.gitmodules", "-z", "--get-regexp",
                r"^submodule\..*\.(path|url)$"], cwd=repo)  # fmt: skip
    if cfg.returncode != 0:
        raise SourceError(f"{super_url}: {commit} has gitlinks but no readable .gitmodules")
    paths: dict[str, str] = {}
    urls: dict[str, str] = {}
    for item in filter(None, cfg.stdout.split("\0")):
        key, _, value = item.partition("\n")
        name, _, attr = key.removeprefix("submodule.").rpartition(".")
        (paths if attr == "path" else urls)[name] = value
    by_path = {p: urls.get(n) for n, p in paths.items()}
    out = []
    for path, sha in sorted(links.items()):
        url = by_path.get(path)
        if not url:
            raise SourceError(f"{super_url}: submodule {path} has no URL in .gitmodules")
        if url.startswith(("./", "../")):
            url = urllib.parse.urljoin(super_url.rstrip("/") + "/", url)
        out.append(Submodule(path, url, sha))
    return out


def _commit_time(repo: Path, commit: str) -> int:
    proc = _git(["show", "-s", "--format=%ct", commit], cwd=repo)
    return int(proc.stdout.strip() or 0)


def _archive_members(
    repo: Path, commit: str, prefix: str
) -> Iterator[tuple[tarfile.TarInfo, bytes | None]]:
    with tempfile.TemporaryFile() as raw:
        proc = subprocess.run(
            ["git", "archive", "--format=tar", f"--prefix={prefix}", commit],
            cwd=repo, env={**os.environ, **_ENV}, stdout=raw, stderr=subprocess.PIPE, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise SourceError(f"git archive {commit} failed: {proc.stderr.decode().strip()}")
        raw.seek(0)
        with tarfile.open(fileobj=raw, mode="r:") as tar:
            for info in tar:
                data = tar.extractfile(info).read() if info.isfile() else None  # type: ignore[union-attr]
                yield info, data


class _Writer:
    """Appends members with normalised metadata; each name once (a gitlink's directory repeats)."""

    def __init__(self, tar: tarfile.TarFile, mtime: int) -> None:
        self.tar, self.mtime, self.seen = tar, mtime, set[str]()

    def add(self, info: tarfile.TarInfo, data: bytes | None) -> None:
        if info.name in self.seen or info.type not in (
            tarfile.REGTYPE,
            tarfile.DIRTYPE,
            tarfile.SYMTYPE,
        ):
            return
        self.seen.add(info.name)
        out = tarfile.TarInfo(info.name)
        out.type, out.linkname = info.type, info.linkname
        out.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
        out.mtime, out.uid, out.gid, out.uname, out.gname = self.mtime, 0, 0, "root", "root"
        if data is None:
            self.tar.addfile(out)
        else:
            out.size = len(data)
            self.tar.addfile(out, io.BytesIO(data))


def fetch(
    source: GitSource,
    dest: Path,
    work_root: Path,
    rewrite: Callable[[str], str],
) -> None:
    """Fetch ``source`` (tag checked, submodules included) and write its tar to ``dest``.

    ``rewrite`` maps an upstream URL onto the mirror (identity without one). ``dest`` appears
    only when everything was fetched and verified.
    """
    url = rewrite(source.git)
    where = f"{source.git} ({source.tag})"
    tagged = remote_tag(url, source.tag)
    if tagged is None:
        raise PinError(f"{where}: tag {source.tag} does not exist at {url}")
    if tagged != source.commit:
        raise PinError(
            f"{where}: tag {source.tag} points to {tagged} at {url}, but the pin is "
            f"{source.commit}",
            hint="check which commit you meant to trust and update 'commit' (or 'tag')",
        )
    work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=work_root, prefix=".git-"))
    try:
        top = f"{source.repo}-{source.tag}/"
        tmp = work / "out.tar"
        with tarfile.open(tmp, mode="w", format=tarfile.GNU_FORMAT) as tar:
            repo = _bare(work / "super.git")
            _fetch_commit(repo, url, source.commit, where)
            writer = _Writer(tar, _commit_time(repo, source.commit))
            _add_tree(writer, repo, source.commit, source.git, top, work, rewrite)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _bare(path: Path) -> Path:
    proc = _git(["init", "--quiet", "--bare", str(path)])
    if proc.returncode != 0:
        raise SourceError(f"cannot create a git repository in {path}: {_why(proc)}")
    return path


def _add_tree(
    writer: _Writer,
    repo: Path,
    commit: str,
    upstream: str,
    prefix: str,
    work: Path,
    rewrite: Callable[[str], str],
) -> None:
    """The commit's files, then each submodule's at its gitlink."""
    for info, data in _archive_members(repo, commit, prefix):
        writer.add(info, data)
    # One level, as `git submodule update --init` does: a submodule's own submodules (test
    # harnesses, mostly) are not part of what the superproject builds from.
    for i, sub in enumerate(submodules(repo, commit, upstream)):
        sub_repo = _bare(work / f"sub{i}.git")
        url = rewrite(sub.url)
        _fetch_commit(sub_repo, url, sub.commit, f"submodule {sub.path} ({sub.url})")
        for info, data in _archive_members(sub_repo, sub.commit, f"{prefix}{sub.path}/"):
            writer.add(info, data)
