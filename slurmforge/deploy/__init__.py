"""Deployment: one typed cluster model, rendered to Slurm config and to a target's manifests.

Where to add a deploy target: ``TARGETS`` and ``open_target`` here, a ``<name>_render`` module
that turns the model (model.py, slurmconf.py) into its manifests and a ``<name>_run`` module
whose class runs them with the methods ``deploy`` and ``scale`` call (``admit``,
``check_deployed``, ``scale``, and ``deploy``/``render``+``apply``).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmforge import options
from slurmforge.errors import ConfigError

TARGETS = ("local", "k8s")
DEFAULT_WAIT = {"local": 180.0, "k8s": 600.0}  # seconds; on k8s, per wait


@dataclass(frozen=True)
class Where:
    """Which cluster, on which target: what every deploy-side task is told."""

    cluster_file: Path
    versions_file: Path
    out_root: Path
    target: str = "local"
    context: str | None = None  # k8s only
    namespace: str | None = None  # k8s only

    def check(self, dry_run: bool = False) -> None:
        """A bad --target, or a k8s-only option on local, refused before anything is read."""
        check_target(self.target)
        if self.target != "k8s":
            local_only(context=self.context, namespace=self.namespace, dry_run=dry_run)

    def wait(self, timeout: str | None) -> float:
        """``--timeout`` in seconds, or the target's default."""
        return options.number("--timeout", timeout, DEFAULT_WAIT[self.target])


def local_only(**given: Any) -> None:
    """Refuse options (``name=value``) that only --target k8s takes."""
    names = [f"--{k.replace('_', '-')}" for k, v in given.items() if v]
    if names:
        raise ConfigError(f"{', '.join(names)}: for --target k8s only")


def open_target(where: Where) -> Any:
    """The target's runner: `Local` or `Kube` (loads both files, connects what it needs)."""
    where.check()
    if where.target == "k8s":
        return open_k8s(
            where.cluster_file, where.versions_file, where.out_root, where.namespace, where.context
        )
    return open_local(where.cluster_file, where.versions_file, where.out_root, where.target)


def deploy(where: Where, timeout: str | None, dry_run: bool = False) -> list[str]:
    """`invoke deploy` on either target; the lines to show the user."""
    check_target(where.target)  # first: the --timeout default depends on it
    seconds = where.wait(timeout)
    where.check(dry_run)
    target = open_target(where)
    if where.target == "k8s":
        directory = target.render()
        versions = target.validate()
        lines = [
            f"wrote {len(target.objects)} objects to {directory} "
            f"(valid for Kubernetes {', '.join(versions)}; `kubectl kustomize` renders it)"
        ]
        return lines if dry_run else [*lines, target.apply(seconds)]
    took = target.deploy(seconds)
    spec = target.cluster.spec
    return [
        f"cluster {spec.name}: {len(target.cluster.nodes)} nodes idle after {took:.1f} s "
        f"(manifests: {target.dir})",
        "log in:  invoke login            (root shell in the jail on the login node)",
        "         invoke login --user NAME",
        f"         ssh -p {spec.login.port} NAME@{spec.login.address}  (key from createuser)",
    ]


def open_local(cluster_file: Path, versions_file: Path, out_root: Path, target: str = "local"):
    """The `local` target for ``cluster_file`` (loads versions.yaml, connects to Docker)."""
    from slurmforge import config
    from slurmforge.deploy import model
    from slurmforge.deploy.local_run import Local
    from slurmforge.engine import Engine

    check_target(target)
    cluster = model.load(cluster_file, config.load(versions_file))
    return Local(cluster, Engine.connect(), out_root)


def check_target(target: str) -> None:
    if target not in TARGETS:
        raise ConfigError(f"--target {target!r}: expected one of {', '.join(TARGETS)}")


def open_k8s(
    cluster_file: Path,
    versions_file: Path,
    out_root: Path,
    namespace: str | None = None,
    context: str | None = None,
):
    """The `k8s` target: images are found in the push lock, else in the local engine."""
    from slurmforge import config
    from slurmforge.deploy import model
    from slurmforge.deploy.k8s_run import Kube
    from slurmforge.engine import Engine
    from slurmforge.errors import EngineUnavailable

    if namespace is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise ConfigError(f"--namespace {namespace!r}: expected a DNS label (a-z, 0-9, -)")
    versions = config.load(versions_file)
    cluster = model.load(cluster_file, versions)
    kube = Kube(cluster, out_root, versions.root, None, namespace, context)
    kube.check_versions()
    with contextlib.suppress(EngineUnavailable):  # fine when the push lock pins every image
        kube.engine = Engine.connect()
    return kube


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
    from slurmforge import config, state
    from slurmforge.deploy import model

    where.check()
    seconds = where.wait(timeout)
    nodeset, count = parse_scale(arg)  # bad input is refused before anything is contacted
    versions = config.load(where.versions_file)
    current = model.load(where.cluster_file, versions)
    names = [ns.name for ns in current.spec.nodesets]
    if nodeset not in names:
        known = ", ".join(names)
        raise ConfigError(f"scale: unknown node set {nodeset!r}; expected one of {known}")
    replicas = {**state.read_scale(current.name), nodeset: count}
    new = model.load(where.cluster_file, versions, replicas)
    target = open_target(where)
    target.admit(new)  # e.g. more GPUs than the host has: refused before anything changes
    target.check_deployed()
    state.write_scale(current.name, replicas)
    return target.scale(new, seconds)
