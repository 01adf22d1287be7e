"""Deployment: one typed cluster model, rendered to Slurm config and to a target's manifests;
here, the entry points the deploy-side tasks call.

The parts, each importing only those before it (docs/development/layout.md, test_layout.py):
spec/ (the cluster file's schema and the checks across its parts), identity/ (SSSD and the
directory), target.py (what a target is, and where to add one), roles/ (what a cluster runs,
for every target: where to add a role or a secret), slurm/ (Slurm's own files, settings,
accounts, database and commands), monitoring.py, backup/ (the archive and taking one),
loader.py (reading a cluster file), and one package per target, local/ and k8s/.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING

from slurmforge.deploy.target import Where
from slurmforge.errors import ConfigError

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import Cluster
    from slurmforge.deploy.target import Target


def open_target(where: Where) -> Target:
    """The chosen target for ``where``."""
    return where.target_class().open(where)


def deploy(where: Where, timeout: str | None, back_up: bool = True) -> list[str]:
    """`invoke deploy` on the chosen target; the lines to show the user."""
    seconds = where.parse_timeout(timeout)
    return [*scale_notes(where), *open_target(where).deploy(seconds, back_up)]


def scale_notes(where: Where) -> list[str]:
    """A note for each node set whose count `invoke scale` keeps apart from the file's: an edit
    of the file's ``replicas`` is not what a deploy takes then, and the user should see that."""
    from slurmforge import state
    from slurmforge.deploy import loader
    from slurmforge.versions import load as load_versions

    cluster = loader.load(where.cluster_file, load_versions(where.versions_file))
    kept = state.read_scale(cluster.name)
    return [
        f"note: node set {ns.name}: {kept[ns.name]} nodes, as `invoke scale` set it, not the "
        f"file's replicas: {ns.replicas} (`invoke scale {ns.name}={ns.replicas}` takes the file's)"
        for ns in cluster.spec.nodesets
        if ns.name in kept and kept[ns.name] != ns.replicas and ns.elastic is None
    ]


def restore(where: Where, archive: Path, force: bool, timeout: str | None) -> list[str]:
    """`invoke restore` on the chosen target. Given no cluster file, it takes the archive's
    own (written into the cluster's state directory, and said where)."""
    seconds = where.parse_timeout(timeout)
    lines = []
    if not where.cluster_given:
        from slurmforge.deploy.backup import restoring

        file = restoring.unpack_cluster(archive)
        where = dataclasses.replace(where, cluster_file=file, cluster_given=True)
        lines.append(f"cluster file: {file} (the archive's; later commands take --cluster {file})")
    return [*lines, *open_target(where).restore(archive, force, seconds)]


def check_namespace(namespace: str | None) -> None:
    if namespace is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise ConfigError(f"--namespace {namespace!r}: expected a DNS label (a-z, 0-9, -)")


def load_cluster(where: Where) -> tuple[Cluster, Path]:
    """The cluster file's model, bound to versions.yaml's images; and that file's directory."""
    from slurmforge import state
    from slurmforge.deploy import loader
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
    from slurmforge.deploy import loader
    from slurmforge.versions import load as load_versions

    seconds = where.parse_timeout(timeout)
    nodeset, count = parse_scale(arg)  # bad input is refused before anything is contacted
    versions = load_versions(where.versions_file)
    current = loader.load(where.cluster_file, versions, state.read_scale)
    names = [ns.name for ns in current.spec.nodesets]
    if nodeset not in names:
        known = ", ".join(names)
        raise ConfigError(f"scale: unknown node set {nodeset!r}; expected one of {known}")
    if current.nodeset(nodeset).elastic:
        raise ConfigError(
            f"scale {arg!r}: node set {nodeset} is elastic: Slurm starts its nodes when jobs need "
            "them and stops them when idle",
            hint=f"change its elastic.min or elastic.max in {where.cluster_file}, then deploy",
        )
    replicas = {**state.read_scale(current.name), nodeset: count}
    new = loader.load(where.cluster_file, versions, replicas)
    target = open_target(where)
    target.admit(new)  # e.g. more GPUs than the host has: refused before anything changes
    target.check_deployed()
    state.write_scale(current.name, replicas)
    return target.scale(new, seconds)
