"""Deployment: one typed cluster model, rendered to Slurm config and to a target's manifests."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmforge.errors import ConfigError

TARGETS = ("local", "k8s")


def open_local(cluster_file: Path, versions_file: Path, out_root: Path, target: str = "local"):
    """The `local` target for ``cluster_file`` (loads versions.yaml, connects to Docker)."""
    from slurmforge import config
    from slurmforge.deploy import model
    from slurmforge.deploy.local import Local
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
    from slurmforge.deploy.kube import Kube
    from slurmforge.engine import Engine
    from slurmforge.errors import EngineUnavailable

    if namespace is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise ConfigError(f"--namespace {namespace!r}: expected a DNS label (a-z, 0-9, -)")
    versions = config.load(versions_file)
    cluster = model.load(cluster_file, versions)
    kube = Kube(cluster, out_root, versions.root, None, namespace, context)
    kube.check_versions()  # refused before anything is contacted
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


def scale(
    open_target: Callable[[], Any],
    cluster_file: Path,
    arg: str,
    versions_file: Path,
    timeout: float,
) -> list[str]:
    """`invoke scale NODESET=N` on a running cluster of either target (``open_target`` makes the
    `Local` or `Kube`, once the input is known to be good); returns the removed nodes. The count
    is kept in the cluster's state and overrides the file's; it is written only once the new
    cluster is valid, fits, and the cluster is deployed."""
    from slurmforge import config, state
    from slurmforge.deploy import model

    nodeset, count = parse_scale(arg)
    versions = config.load(versions_file)
    current = model.load(cluster_file, versions)
    names = [ns.name for ns in current.spec.nodesets]
    if nodeset not in names:
        known = ", ".join(names)
        raise ConfigError(f"scale: unknown node set {nodeset!r}; expected one of {known}")
    replicas = {**state.read_scale(current.name), nodeset: count}
    new = model.load(cluster_file, versions, replicas)
    target = open_target()
    target.admit(new)  # e.g. more GPUs than the host has: refused before anything changes
    target.check_deployed()
    state.write_scale(current.name, replicas)
    return target.scale(new, timeout)
