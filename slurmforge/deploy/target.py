"""What a deploy target is: which cluster on which target every deploy-side task is told
(`Where`), and what each command asks of a target (`Target`).

Where to add a deploy target: a package beside local/ and k8s/ whose ``run`` module holds a
class that implements `Target` (its ``render`` module turns the model and the roles into
manifests), its name in TARGETS and its class in commands.py. A command the target cannot
carry out is left to `Target`'s own method, which refuses it with one line and a hint; the CLI
never tests the target's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, ClassVar

from slurmforge.errors import ConfigError

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import Cluster


# the targets' names; commands.py maps each to its Target class
TARGETS = ("local", "k8s")


@dataclass(frozen=True)
class Where:
    """Which cluster, on which target: what every deploy-side task is told."""

    cluster_file: Path
    versions_file: Path
    out_root: Path
    target: str = "local"
    context: str | None = None
    namespace: str | None = None
    dry_run: bool = False
    cluster_given: bool = True  # False: --cluster was left to its default


class Target:
    """What every deploy-side command asks of a target. A target overrides what it supports;
    the rest is refused here, naming the command and the target."""

    NAME: ClassVar[str]
    DEFAULT_WAIT: ClassVar[float]  # seconds
    OPTIONS: ClassVar[frozenset[str]] = frozenset()  # target-only options it takes
    cluster: Cluster
    log: IO[str]

    @classmethod
    def open(cls, where: Where) -> Target:
        """The target for ``where`` (loads both files, connects what it needs)."""
        raise NotImplementedError

    def _unsupported(self, command: str, hint: str | None = None) -> ConfigError:
        return ConfigError(f"invoke {command}: not supported by --target {self.NAME}", hint=hint)

    def deploy(self, timeout: float, back_up: bool = True) -> list[str]:
        """Render, apply, wait until every node is in service; the lines to show the user.
        ``back_up``: take a backup before a Slurm series change."""
        raise self._unsupported("deploy")

    def backup(self, out: Path | None, scheduled: bool = False) -> list[str]:
        """Write one archive of the running cluster into ``out`` (or its default directory);
        the summary to show. ``scheduled``: copy the newest the cluster's schedule took. A
        target that backs up gives backup.take what it asks (backup.access.BackupAccess)."""
        if scheduled:
            raise self._unsupported(
                "backup --from-schedule", hint="scheduled backups are the k8s target's"
            )
        raise self._unsupported("backup")

    def restore(self, archive: Path, force: bool, timeout: float) -> list[str]:
        """Bring the cluster of ``archive`` back here; the summary to show."""
        raise self._unsupported("restore", "restore with --target local")

    def admit(self, new: Cluster) -> None:
        """Refuse ``new`` (this cluster with other node counts) when it cannot run here."""

    def check_deployed(self) -> None:
        """Refuse a cluster that is not deployed here."""
        raise self._unsupported("scale")

    def scale(self, new: Cluster, timeout: float) -> list[str]:
        """Apply ``new``; the removed nodes."""
        raise self._unsupported("scale")

    def status(self) -> str:
        raise self._unsupported("status")

    def down(self, volumes: bool) -> None:
        raise self._unsupported("down")

    def login_argv(self, user: str | None) -> list[str]:
        """The command that opens a shell in the jail on the login node."""
        raise self._unsupported("login")

    def sh(self, role: str, command: str) -> tuple[int, str]:
        """Run ``command`` with bash in the role's (first) container: exit status, output."""
        raise NotImplementedError

    def gpu_check(self, min_busbw: float | None, command: str | None) -> list:
        """Run the GPU health check once on every GPU node (healthcheck.NodeCheck each)."""
        raise self._unsupported("gpu-check")
