"""Populate a jail: run the jail image's own populate entrypoint against a directory or volume."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from slurmforge import jail_contract
from slurmforge.engine import Engine
from slurmforge.errors import BuildError, ConfigError, quote

MOUNT = jail_contract.ROOT
# What makes a directory a jail, on disk (see jail_contract): populate only ever writes into an
# empty directory or one that carries either file.
MARKER, SENTINEL = jail_contract.MARKER, jail_contract.SENTINEL
LABEL = "io.slurmforge.jail-populate"
# Never a jail, nor any directory above one of these: populate deletes what the image lacks.
SYSTEM_DIRS = (
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr",
    "/usr/bin", "/usr/lib", "/usr/local", "/usr/sbin", "/usr/share", "/var", "/var/lib",
    "/var/log", "/var/tmp",
)  # fmt: skip
VOLUME_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")  # Docker's rule for volume names
IGNORED = {"lost+found"}  # what a new filesystem holds before anything is written


def is_path(into: str) -> bool:
    """A target that names a host directory (a bind mount) rather than a Docker volume."""
    return into.startswith(("/", "./", "../", "~")) or into in (".", "..")


def check_into(into: str) -> str:
    """What ``--into`` names, checked before anything is written: a host directory (resolved:
    missing, empty, or a jail) or a Docker volume name. Returns the resolved path or the name."""
    if not is_path(into):
        if not VOLUME_NAME.fullmatch(into):
            raise ConfigError(
                f"--into {quote(into)}: expected a directory (/…, ./…, ~/…) or a Docker volume "
                "name (letters, digits, _ . -)"
            )
        return into
    target = Path(into).expanduser().resolve()
    if str(target) == "/" or any(
        str(target) == d or d.startswith(f"{target}/") for d in SYSTEM_DIRS
    ):
        raise ConfigError(f"--into {quote(into)}: {target} is a system directory, never a jail")
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--into {quote(into)}: {target} exists and is not a directory")
    if target.is_dir() and not is_jail(target):
        raise ConfigError(
            f"--into {quote(into)}: {target} holds files but no {MARKER}: it is not a jail, and "
            "populate would delete what the image lacks",
            hint="populate into an empty or new directory",
        )
    return str(target)


def is_jail(directory: Path) -> bool:
    """Empty (but for lost+found), or marked by populate."""
    if (directory / MARKER).is_file() or (directory / SENTINEL).is_file():
        return True
    try:
        return all(entry.name in IGNORED for entry in directory.iterdir())
    except OSError as exc:
        raise ConfigError(f"--into {directory}: cannot list it: {exc.strerror}") from None


def populate(
    engine: Engine,
    jail_ref: str,
    into: str,
    keep: Iterable[str] = (),
    out: IO[str] | None = None,
    rsync_opts: str = "",
    usr_only: bool = False,
    skip: Iterable[str] = (),
) -> str:
    """Copy the jail image into ``into`` (a path or a volume name) but for ``skip``; returns
    the image ID. ``usr_only``: its /usr alone, for the nodes of another arch than the jail's."""
    skip = tuple(skip)
    out = out or sys.stdout
    info = engine.inspect(jail_ref)
    if info is None:
        raise ConfigError(f"jail image {jail_ref} is not built", hint="run: invoke build")
    source = check_into(into)
    if is_path(into):
        Path(source).mkdir(parents=True, exist_ok=True)
    done = jail_contract.record(info.id, skip)
    if _holds(engine, source, done):
        # the entrypoint's answer, without starting a container for it, and in words: its
        # record of what was left out reads "<digest> without <paths>"
        but = f", all but {' '.join(skip)} (what only a feature this cluster leaves off uses)"
        out.write(f"populate: {into} already holds {info.id}{but if skip else ''}\n")
        return info.id
    code = engine.run(
        info.id,
        [MOUNT],
        jail_contract.populate_env(info.id, keep, rsync_opts, usr_only, skip),
        {source: MOUNT},
        {LABEL: into},
        out,
    )
    if code == 2:
        raise ConfigError(f"jail populate refused {into} (see its message above)")
    if code:
        raise BuildError(f"jail populate into {into} failed with exit code {code}")
    return info.id


def _holds(engine: Engine, source: str, done: str) -> bool:
    """Whether the jail at ``source`` records ``done`` (jail_contract.record), when this host
    can read it directly (a directory, or a local volume of a daemon on this machine); False when
    it cannot tell."""
    if source.startswith("/"):
        root = Path(source)
    else:
        where = engine.volume_path(source)
        if where is None:  # not there yet
            return False
        root = Path(where)
    try:
        return (root / SENTINEL).read_text().strip() == done
    except OSError:  # not there, or not readable from here (a remote daemon)
        return False
