"""Populate a jail: run the jail image's own populate entrypoint against a directory or volume."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import docker

from slurmforge.engine import Engine
from slurmforge.errors import BuildError, ConfigError

MOUNT = "/jail"
SENTINEL = ".slurmforge/populated"  # written by jail/populate after a complete copy
LABEL = "io.slurmforge.jail-populate"


def is_path(into: str) -> bool:
    """A target that names a host directory (a bind mount) rather than a Docker volume."""
    return into.startswith(("/", "./", "../", "~")) or into in (".", "..")


def populate(
    engine: Engine,
    jail_ref: str,
    into: str,
    keep: Iterable[str] = (),
    out: IO[str] | None = None,
    rsync_opts: str = "",
) -> str:
    """Copy the jail image into ``into`` (a path or a volume name); returns the image ID."""
    out = out or sys.stdout
    info = engine.inspect(jail_ref)
    if info is None:
        raise ConfigError(f"jail image {jail_ref} is not built", hint="run: invoke build")
    if is_path(into):
        target = Path(into).expanduser().resolve()
        target.mkdir(parents=True, exist_ok=True)
        source = str(target)
    else:
        source = into
    if _holds(engine, source, info.id):
        # the same answer the entrypoint would give, without starting a container for it
        out.write(f"populate: {into} already holds {info.id}\n")
        return info.id
    container = engine.client.containers.run(
        info.id,
        command=[MOUNT],
        environment={
            "SLURMFORGE_JAIL_DIGEST": info.id,
            "SLURMFORGE_JAIL_KEEP": " ".join(keep),
            "SLURMFORGE_JAIL_RSYNC_OPTS": rsync_opts,
        },
        volumes={source: {"bind": MOUNT, "mode": "rw"}},
        labels={LABEL: into},
        detach=True,
    )
    try:
        for chunk in container.logs(stream=True, follow=True):
            out.write(chunk.decode(errors="replace"))
            out.flush()
        code = container.wait()["StatusCode"]
    finally:
        container.remove(force=True)
    if code == 2:
        raise ConfigError(f"jail populate refused {into} (see its message above)")
    if code:
        raise BuildError(f"jail populate into {into} failed with exit code {code}")
    return info.id


def _holds(engine: Engine, source: str, digest: str) -> bool:
    """Whether the jail at ``source`` records ``digest``, when this host can read it directly
    (a directory, or a local volume of a daemon on this machine); False when it cannot tell."""
    if source.startswith("/"):
        root = Path(source)
    else:
        try:
            root = Path(engine.client.volumes.get(source).attrs["Mountpoint"])
        except (docker.errors.NotFound, docker.errors.APIError, KeyError):  # not there yet
            return False
    try:
        return (root / SENTINEL).read_text().strip() == digest
    except OSError:  # not there, or not readable from here (a remote daemon)
        return False
