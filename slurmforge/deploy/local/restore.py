"""`invoke restore` on the local target: an archive (archive.py) back into a cluster on this
host. The secrets are written before anything starts; the jail's user state and StateSave go into
the new volumes before the jail is populated (populate keeps them and merges the accounts), and
the embedded directory's entries and the portal hub's database into theirs; the database is
loaded before slurmdbd starts; then the cluster starts as `invoke deploy` starts it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from slurmforge import state
from slurmforge.deploy import roles
from slurmforge.deploy.backup import archive, restoring
from slurmforge.deploy.backup.access import BackupAccess
from slurmforge.deploy.local.compose import Project
from slurmforge.deploy.local.preflight import Preflight
from slurmforge.deploy.roles import (
    CONTROLLER,
    CONTROLLER_STATE,
    DATABASE,
    DIRECTORY_DATA,
    JAIL,
    PORTAL_DATA,
)
from slurmforge.engine import Engine
from slurmforge.errors import ConfigError, DeployError


class Host(BackupAccess, Protocol):
    """What a restore asks of the local target (local/run.py's Local)."""

    engine: Engine
    project: Project
    check: Preflight


class Restore:
    """An archive put back into ``local``'s cluster: the secrets before anything starts, the
    jail's user state and StateSave into the new volumes before the jail is populated (populate
    keeps them and merges the accounts), the database loaded before slurmdbd starts. The
    archive is verified whole first."""

    def __init__(self, local: Host, path: Path) -> None:
        self.started = time.monotonic()
        self.local = local
        self.path = path
        self.manifest = archive.verify(path)

    def check(self, force: bool) -> bool:
        """Refuse an archive of another cluster, a Slurm move Slurm cannot make, and a cluster
        that has state here (unless ``force``, which removes it). True: a series change."""
        cluster = self.local.cluster
        upgrading = restoring.admit(cluster, self.path, self.manifest)
        self.local.check.image_ids()  # unbuilt images: refused before anything is deleted
        found = self.existing()
        if found and not force:
            kinds = [f.split()[0] for f in found]
            counts = ", ".join(
                f"{kinds.count(k)} {k}{'s' * (kinds.count(k) > 1)}" for k in dict.fromkeys(kinds)
            )
            raise ConfigError(
                f"cluster {cluster.name} already has state on this host ({counts}): a restore "
                "would replace it",
                hint="restore with --force to delete it first, or run: invoke down --volumes",
            )
        if found:
            self.remove_everything()
            left = self.existing()
            if left:
                raise DeployError(f"cluster {cluster.name}: could not remove {', '.join(left)}")
        return upgrading

    def remove_everything(self) -> None:
        """The cluster's containers, volumes and secrets (a restore --force replaces them)."""
        project, engine = self.local.project, self.local.engine
        if project.file.exists():
            project.compose("down", "--remove-orphans", "--volumes")
        for container in project.containers().values():
            engine.remove_container(container)
        for volume in project.volumes():
            engine.remove_volume(volume)
        state.forget_cluster(self.local.cluster.name, roles.SECRETS)

    def existing(self) -> list[str]:
        local = self.local
        found = [f"container {c.name}" for c in local.project.containers().values()]
        found += [f"volume {v}" for v in local.project.volumes()]
        directory = state.cluster_dir(local.cluster.name)
        found += [f"secret {p}" for p in sorted(directory.glob("*")) if p.name in roles.SECRETS]
        return found

    def secrets(self) -> None:
        """The archive's secrets into the cluster's state directory (only names slurmforge
        gives its secrets: an archive names no other file there)."""
        for name in self.manifest.members:
            file = name.removeprefix("secrets/")
            if name.startswith("secrets/") and file in roles.SECRETS:
                with archive.member(self.path, name) as source:
                    data = source.read()
                state.ensure_secret(self.local.cluster.name, file, lambda data=data: data)

    def _feed(self, volume: str, member: str, *command: str) -> None:
        """The archive's ``member`` on the standard input of ``command``, run in a throwaway
        container (slurmctld's image, no network) with ``volume`` at /dst."""
        argv = [
            "docker", "run", "--rm", "-i", "--network", "none", "-v", f"{volume}:/dst",
            "--entrypoint", command[0], self.local.cluster.images[CONTROLLER], *command[1:],
        ]  # fmt: skip
        what = f"{member} into volume {volume}"
        restoring.feed_member(self.path, self.manifest, member, argv, what, self.local.log)

    def volumes(self) -> None:
        """Into the volumes Compose has just made, before anything runs on them."""
        name = self.local.cluster.name
        untar = ("tar", "--numeric-owner", "-xpf", "-", "-C", "/dst")
        self._feed(f"{name}_{CONTROLLER_STATE.local}", "state.tar", *untar)
        self._feed(f"{name}_{JAIL}", "jail.tar", *untar)
        if restoring.restores_directory(self.local.cluster, self.manifest):
            # slapd-init loads it in place of the seed at slapd's first start, before any
            # node's SSSD asks
            write = f"umask 077 && cat > /dst/{restoring.DIRECTORY_RESTORE}"
            self._feed(
                f"{name}_{DIRECTORY_DATA.local}", restoring.DIRECTORY_MEMBER, "sh", "-c", write
            )
        if restoring.restores_portal(self.local.cluster, self.manifest):
            # the hub's, before it first starts: its users' sessions and servers as they were
            write = f"umask 077 && cat > /dst/{roles.PORTAL_DB}"
            self._feed(f"{name}_{PORTAL_DATA.local}", restoring.PORTAL_MEMBER, "sh", "-c", write)

    def database(self) -> None:
        """Start the cluster's own database alone and load the dump into it."""
        if "database.sql" in self.manifest.members:
            self.local.project.compose("up", "-d", DATABASE)
            restoring.load_dump(self.local, self.path, self.manifest,
                             lambda: self.local.project.tail(DATABASE))  # fmt: skip

    def summary(self) -> list[str]:
        manifest = self.manifest
        took = time.monotonic() - self.started
        return [
            f"restored cluster {manifest.cluster} from {self.path} (backup of "
            f"{manifest.created}, Slurm {manifest.slurm}) in {took:.1f} s",
            *(f"note: {n}" for n in manifest.notes),
        ]
