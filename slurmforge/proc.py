"""The one subprocess seam: every external command is echoed (quoted) before it runs."""

from __future__ import annotations

import errno
import os
import select
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO


def run(
    cmd: Sequence[str],
    *,
    log: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    capture: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; echo it to ``log`` (or stderr); send its output to ``log`` unless captured."""
    echo = log if log is not None else sys.stderr
    print(f"+ {shlex.join(cmd)}", file=echo, flush=True)
    full_env = {**os.environ, **env} if env else None
    if capture:
        return subprocess.run(
            cmd, env=full_env, cwd=cwd, check=check, text=True, capture_output=True
        )
    try:
        return subprocess.run(
            cmd,
            env=full_env,
            cwd=cwd,
            check=check,
            text=True,
            stdout=log,
            stderr=subprocess.STDOUT if log is not None else None,
        )
    except subprocess.CalledProcessError:
        if log is None and reader_gone(1):  # the stdout the command inherited
            # it failed writing to our reader, gone (`invoke status | head -1`): the quiet end
            # of such a command line (launch.py), not the error of a command that failed
            raise BrokenPipeError(errno.EPIPE, "the output's reader went away") from None
        raise


def reader_gone(fd: int) -> bool:
    """Whether ``fd`` is a pipe whose reading end is closed (Linux marks it so to poll)."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _git(repo: Path, *args: str) -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def git_revision(repo: Path) -> str:
    """The checked-out commit (with ``-dirty`` when the tree has changes), or ``unknown``."""
    rev = _git(repo, "rev-parse", "HEAD")
    if rev is None:
        return "unknown"
    dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return f"{rev}-dirty" if dirty else rev


def git_origin(repo: Path) -> str:
    """Where the source lives: the ``origin`` remote, else the checkout's file:// URL."""
    return _git(repo, "remote", "get-url", "origin") or repo.resolve().as_uri()
