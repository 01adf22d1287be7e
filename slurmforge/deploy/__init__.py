"""Deployment: one typed cluster model, rendered to Slurm config and to a target's manifests.

What a cluster runs is declared once, in roles.py (where to add a role or a secret); the model
(model.py) and Slurm's configuration (slurmconf.py) are the same for every target.

Where to add a deploy target: a class that implements `Target` (its ``<name>_render`` module
turns the model and the roles into manifests; its ``<name>_run`` module holds the class), and a
line in TARGETS. A command the target cannot carry out is left to `Target`'s own method, which
refuses it with one line and a hint; the CLI never tests the target's name.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, ClassVar

from slurmforge import options
from slurmforge.errors import ConfigError

if TYPE_CHECKING:
    from slurmforge.deploy.roles import Secret
    from slurmforge.deploy.spec.model import Cluster

# name → "module:class" of its Target (imported when chosen: each brings its own dependencies)
TARGETS = {
    "local": "slurmforge.deploy.local.run:Local",
    "k8s": "slurmforge.deploy.k8s.run:Kube",
}


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

    def target_class(self) -> type[Target]:
        """The chosen target's class; a bad --target, or an option the target does not take,
        refused before anything is read."""
        if self.target not in TARGETS:
            raise ConfigError(f"--target {self.target!r}: expected one of {', '.join(TARGETS)}")
        module, name = TARGETS[self.target].split(":")
        cls: type[Target] = getattr(importlib.import_module(module), name)
        given = {"context": self.context, "namespace": self.namespace, "dry_run": self.dry_run}
        refused = [k for k, v in given.items() if v and k not in cls.OPTIONS]
        if refused:
            takers = [t for t in TARGETS if t != self.target]
            names = ", ".join(f"--{k.replace('_', '-')}" for k in refused)
            raise ConfigError(f"{names}: for --target {' or '.join(takers)} only")
        return cls

    def wait(self, timeout: str | None) -> float:
        """``--timeout`` in seconds, or the target's default."""
        return options.number("--timeout", timeout, self.target_class().DEFAULT_WAIT)


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
        the summary to show. ``scheduled``: copy the newest the cluster's schedule took."""
        from slurmforge.deploy.backup import take as backup

        if scheduled:
            raise self._unsupported(
                "backup --from-schedule", hint="scheduled backups are the k8s target's"
            )
        return backup.backup(self, out)[1]

    def exec_argv(self, role: str, command: str) -> list[str]:
        """The command line that runs ``command`` with bash in the role's (first) container,
        this process' standard input and output connected to it."""
        raise self._unsupported("backup")

    def secret(self, secret: Secret) -> bytes | None:
        """What the cluster's secret holds (one slurmforge made), or None when it has none."""
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


def open_target(where: Where) -> Target:
    """The chosen target for ``where``."""
    return where.target_class().open(where)


def deploy(where: Where, timeout: str | None, back_up: bool = True) -> list[str]:
    """`invoke deploy` on the chosen target; the lines to show the user."""
    seconds = where.wait(timeout)
    return open_target(where).deploy(seconds, back_up)


def check_namespace(namespace: str | None) -> None:
    if namespace is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise ConfigError(f"--namespace {namespace!r}: expected a DNS label (a-z, 0-9, -)")


def load_cluster(where: Where) -> tuple[Cluster, Path]:
    """The cluster file's model, bound to versions.yaml's images; and that file's directory."""
    from slurmforge import state
    from slurmforge.deploy.spec import loader
    from slurmforge.versions import load as load_versions

    versions = load_versions(where.versions_file)
    return loader.load(where.cluster_file, versions, state.read_scale), versions.root


def parse_scale(arg: str) -> tuple[str, int]:
    """``NODESET=N`` with N a non-negative integer."""
    match = re.fullmatch(r"([a-z][a-z0-9-]*)=(.*)", arg)
    if not match:
        raise ConfigError(f"scale {arg!r}: expected NODESET=N, e.g. cpu=3")
    nodeset, count = match.groups()
    if not re.fullmatch(r"[0-9]+", count):
        raise ConfigError(f"scale {arg!r}: the node count must be an integer >= 0, got {count!r}")
    return nodeset, int(count)


def scale(where: Where, arg: str, timeout: str | None) -> list[str]:
    """`invoke scale NODESET=N` on a running cluster of either target; returns the removed
    nodes. The count is kept in the cluster's state and overrides the file's; it is written only
    once the new cluster is valid, fits, and the cluster is deployed."""
    from slurmforge import state
    from slurmforge.deploy.spec import loader
    from slurmforge.versions import load as load_versions

    seconds = where.wait(timeout)
    nodeset, count = parse_scale(arg)  # bad input is refused before anything is contacted
    versions = load_versions(where.versions_file)
    current = loader.load(where.cluster_file, versions, state.read_scale)
    names = [ns.name for ns in current.spec.nodesets]
    if nodeset not in names:
        known = ", ".join(names)
        raise ConfigError(f"scale: unknown node set {nodeset!r}; expected one of {known}")
    replicas = {**state.read_scale(current.name), nodeset: count}
    new = loader.load(where.cluster_file, versions, replicas)
    target = open_target(where)
    target.admit(new)  # e.g. more GPUs than the host has: refused before anything changes
    target.check_deployed()
    state.write_scale(current.name, replicas)
    return target.scale(new, seconds)
