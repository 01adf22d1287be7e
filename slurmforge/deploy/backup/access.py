"""What a backup needs of a deploy target: a command in a role's container (its output, or its
command line for a stream) and the cluster's secrets. Both targets provide it."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from slurmforge.deploy.roles import Secret
    from slurmforge.deploy.spec.model import Cluster


@runtime_checkable
class BackupAccess(Protocol):
    cluster: Cluster
    log: IO[str]

    def sh(self, role: str, command: str) -> tuple[int, str]:
        """Run ``command`` with bash in the role's (first) container: exit status, output."""
        ...

    def exec_argv(self, role: str, command: str) -> list[str]:
        """The command line that runs ``command`` with bash in the role's (first) container,
        this process' standard input and output connected to it."""
        ...

    def secret(self, secret: Secret) -> bytes | None:
        """What the cluster's secret holds (one slurmforge made), or None when it has none."""
        ...
