"""Real git repositories on disk for the git source tests: made with the git client, served by
file:// URLs, laid out like a mirror (<dir>/<host>/<path>) when asked."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost",
    "GIT_AUTHOR_DATE": "2024-05-16T23:38:00Z", "GIT_COMMITTER_DATE": "2024-05-16T23:38:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args],
        cwd=repo, env={**os.environ, **_ENV}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return proc.stdout.strip()


@dataclass(frozen=True)
class Repo:
    path: Path  # a non-bare repository; clone URL path.as_uri()
    commit: str  # HEAD, tagged
    tag: str

    @property
    def url(self) -> str:
        return self.path.as_uri()


def make_repo(path: Path, files: dict[str, str], tag: str = "v1.0", annotated: bool = True) -> Repo:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
        if name.endswith(".sh"):
            (path / name).chmod(0o755)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "release")
    git(path, "tag", *(["-a", "-m", tag] if annotated else []), tag)
    return Repo(path, git(path, "rev-parse", "HEAD"), tag)


def add_submodule(repo: Repo, sub: Repo, where: str, url: str) -> Repo:
    """Add ``sub`` at ``where`` with ``url`` in .gitmodules; commit and move the tag."""
    git(repo.path, "submodule", "add", "-q", sub.url, where)
    git(repo.path, "config", "-f", ".gitmodules", f"submodule.{where}.url", url)
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "-m", f"add {where}")
    git(repo.path, "tag", "-f", "-a", "-m", repo.tag, repo.tag)
    return Repo(repo.path, git(repo.path, "rev-parse", "HEAD"), repo.tag)
