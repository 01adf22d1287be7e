"""The entry points the deploy-side tasks call (tasks.py): deploy, restore and scale on the
chosen target, which is looked up here among the targets' classes. Nothing below imports this
module: the targets read their cluster file through the package's load_cluster."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

from slurmforge import options
from slurmforge.deploy.target import TARGETS, Target, Where
from slurmforge.errors import ConfigError

# each target's class as module:name, imported only once a command chooses it: a command on one
# target does not import the other's modules (bench/b26_target_import.py)
CLASSES = {"local": "slurmforge.deploy.local.run:Local", "k8s": "slurmforge.deploy.k8s.run:Kube"}
assert tuple(CLASSES) == TARGETS, "target.TARGETS names the classes here, in this order"


def target_class(where: Where) -> type[Target]:
    """The chosen target's class; a bad --target, or an option the target does not take,
    refused before anything is read."""
    if where.target not in CLASSES:
        raise ConfigError(f"--target {where.target!r}: expected one of {', '.join(TARGETS)}")
    module, _, name = CLASSES[where.target].partition(":")
    cls: type[Target] = getattr(importlib.import_module(module), name)
    given = {"context": where.context, "namespace": where.namespace, "dry_run": where.dry_run}
    refused = [k for k, v in given.items() if v and k not in cls.OPTIONS]
    if refused:
        takers = [t for t in TARGETS if t != where.target]
        names = ", ".join(f"--{k.replace('_', '-')}" for k in refused)
        raise ConfigError(f"{names}: for --target {' or '.join(takers)} only")
    return cls


def timeout_of(where: Where, timeout: str | None) -> float:
    """``--timeout`` parsed into seconds, or the target's default when not given."""
    return options.number("--timeout", timeout, target_class(where).DEFAULT_WAIT)


def open_target(where: Where) -> Target:
    """The chosen target for ``where``."""
    return target_class(where).open(where)


def deploy(where: Where, timeout: str | None, back_up: bool = True) -> list[str]:
    """`invoke deploy` on the chosen target; the lines to show the user."""
    seconds = timeout_of(where, timeout)
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
    seconds = timeout_of(where, timeout)
    lines = []
    if not where.cluster_given:
        from slurmforge.deploy.backup import restoring

        file = restoring.unpack_cluster(archive)
        where = dataclasses.replace(where, cluster_file=file, cluster_given=True)
        lines.append(f"cluster file: {file} (the archive's; later commands take --cluster {file})")
    return [*lines, *open_target(where).restore(archive, force, seconds)]


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

    seconds = timeout_of(where, timeout)
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
