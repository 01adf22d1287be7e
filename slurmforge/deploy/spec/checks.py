"""The checks across a cluster file's parts that its schema cannot express: names that refer to
each other, ports that collide, settings that need others, the files it names. Each part's own
check takes that part (site.py, identity.py); what spans parts is here."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from slurmforge.deploy import portal_tls
from slurmforge.deploy.spec import health, identity, site, tres
from slurmforge.deploy.spec.fields import check_private, is_file
from slurmforge.deploy.spec.model import ClusterSpec, Partition
from slurmforge.errors import ConfigError
from slurmforge.inputs import format_path


def check(path: Path, spec: ClusterSpec, reserved: Collection[str] = ()) -> None:
    """What the schema cannot say about the whole file: names that refer to each other, ports
    that collide, settings that need others, and the files it names. ``reserved``: names a node
    set may not take (the roles')."""
    names = [ns.name for ns in spec.nodesets]  # unique: Layers refuses duplicates first
    for i, name in enumerate(names):
        if name in reserved:
            raise ConfigError(f"{path}: nodesets[{i}].name: {name!r} is reserved")
    seen: set[str] = set()
    for i, part in enumerate(spec.partitions):
        if part.name in seen:
            raise ConfigError(f"{path}: partitions[{i}].name: duplicate partition {part.name!r}")
        seen.add(part.name)
        for j, ns in enumerate(part.nodesets):
            if ns not in names:
                raise ConfigError(
                    f"{path}: {format_path(('partitions', i, 'nodesets', j))}: unknown node set "
                    f"{ns!r}; expected one of {', '.join(names)}"
                )
    for i, ns in enumerate(spec.nodesets):
        for gres in ns.gres:
            parts = gres.split(":")
            if parts[0] == "gpu" and not (len(parts) in (2, 3) and parts[-1].isdigit()):
                raise ConfigError(
                    f"{path}: nodesets[{i}].gres: {gres!r}: expected gpu[:type]:count"
                )
        if ns.gpus and not any(ns.name in p.nodesets for p in spec.partitions):
            raise ConfigError(
                f"{path}: nodesets[{i}]: GPU node set {ns.name!r} is in no partition; the GPU "
                "health check (and every job) needs one: add it to a partition's nodesets"
            )
    _check_elastic(path, spec)
    if sum(p.default for p in spec.partitions) > 1:
        raise ConfigError(f"{path}: partitions: more than one partition has default: true")
    if spec.rest.enabled and not spec.accounting.enabled:
        raise ConfigError(
            f"{path}: rest.enabled: slurmrestd authenticates with JWT, whose key slurmdbd and "
            "slurmctld share; set accounting.enabled: true, or rest.enabled: false"
        )
    published = [("login.port", spec.login.port)]
    if spec.rest.enabled:
        published.append(("rest.port", spec.rest.port))
    if spec.metrics.enabled and spec.metrics.prometheus.enabled:
        published.append(("metrics.prometheus.port", spec.metrics.prometheus.port))
    if spec.portal.enabled:
        published.append(("portal.port", spec.portal.port))
    for i, (key, port) in enumerate(published):
        taken_by = next((k for k, p in published[:i] if p == port), None)
        if taken_by:
            raise ConfigError(f"{path}: {key}: {port} is {taken_by} already")
    _check_site(path, spec, names)
    _check_accounts_from_groups(path, spec)
    identity.check(path, spec.identity)
    _check_portal(path, spec)
    _check_default_account(path, spec)
    database = spec.accounting.database
    if spec.accounting.enabled and database and not is_file(database.password_secret):
        raise ConfigError(
            f"{path}: accounting.database.password_secret: no file {database.password_secret}",
            hint="write the database password into that file (mode 0600), or leave out "
            "accounting.database to run the cluster's own MariaDB",
        )
    if spec.accounting.enabled and database:
        where = f"{path}: accounting.database.password_secret"
        check_private(where, database.password_secret)


def _check_elastic(path: Path, spec: ClusterSpec) -> None:
    """min within max; one idle time per partition (Slurm's SuspendTime is a partition's)."""
    for i, ns in enumerate(spec.nodesets):
        if ns.elastic and ns.elastic.min > ns.elastic.max:
            raise ConfigError(
                f"{path}: nodesets[{i}].elastic.min: {ns.elastic.min} is more than "
                f"elastic.max ({ns.elastic.max})"
            )
    sets = {ns.name: ns for ns in spec.nodesets}
    for i, part in enumerate(spec.partitions):
        idle = {sets[n].elastic.idle for n in part.nodesets if sets[n].elastic}
        if len(idle) > 1:
            raise ConfigError(
                f"{path}: partitions[{i}].nodesets: elastic node sets with different "
                f"elastic.idle ({', '.join(f'{s} s' for s in sorted(idle))}) in one partition; "
                "Slurm stops a partition's idle nodes after one time (SuspendTime): give them "
                "the same idle, or partitions of their own"
            )


def _check_site(path: Path, spec: ClusterSpec, names: list[str]) -> None:
    """The site's scripts exist, its mounts do not overlap, its topology and accounts name what
    the file declares, and its limits name TRES the cluster tracks."""
    for kind in ("prolog", "epilog"):
        site.check_scripts(path, kind, getattr(spec.slurm, kind))
    site.check_mounts(path, spec.jail.scratch, spec.mounts)
    health.check(path, spec.health)
    if spec.topology:
        site.check_topology(path, spec.topology, names)
    site.check_qos(path, spec.accounting.qos, spec.accounting.accounts)
    tres.check(path, spec)
    if (spec.accounting.qos or spec.accounting.accounts) and not spec.accounting.enabled:
        raise ConfigError(
            f"{path}: accounting.qos: QoS and accounts live in slurmdbd; set "
            "accounting.enabled: true"
        )


def _check_accounts_from_groups(path: Path, spec: ClusterSpec) -> None:
    """Accounts mapped from directory groups need accounting, a directory and the account."""
    mapped = spec.accounting.accounts_from_groups
    declared = {a.name for a in spec.accounting.accounts}
    for account, group in mapped.items():
        if not spec.accounting.enabled:
            raise ConfigError(
                f"{path}: accounting.accounts_from_groups.{account}: associations live in "
                "slurmdbd; set accounting.enabled: true, or leave this out"
            )
        if spec.identity.source != "ldap":
            raise ConfigError(
                f"{path}: accounting.accounts_from_groups.{account}: groups come from a "
                "directory; set identity.source: ldap (with identity.ldap), or leave this out"
            )
        if account not in declared:
            raise ConfigError(
                f"{path}: accounting.accounts_from_groups.{account}: no account {account!r} in "
                f"accounting.accounts (the group {group!r} maps to it); declare it there"
            )


def _check_default_account(path: Path, spec: ClusterSpec) -> None:
    """A directory's users need no default account: only createuser uses it."""
    if spec.identity.source == "ldap" and "default_account" in spec.accounting.model_fields_set:
        raise ConfigError(
            f"{path}: accounting.default_account: only createuser uses it, and with "
            "identity.source: ldap users come from the directory; map groups to accounts with "
            "accounting.accounts_from_groups instead"
        )


def portal_partition(spec: ClusterSpec) -> Partition:
    """The portal form's first partition: its own, else the cluster's default, else the first."""
    wanted = spec.portal.form.partition
    if wanted is not None:
        return next(p for p in spec.partitions if p.name == wanted)
    return next((p for p in spec.partitions if p.default), spec.partitions[0])


def portal_limits(spec: ClusterSpec, partition: Partition) -> dict[str, int]:
    """The most a notebook server (one task on one node) may ask of ``partition``: its largest
    node set's CPUs, memory and GPUs."""
    sets = [ns for ns in spec.nodesets if ns.name in partition.nodesets]
    return {
        "cpus": max(ns.cpus for ns in sets),
        "memory_mb": max(ns.memory_mb for ns in sets),
        "gpus": max(ns.gpus for ns in sets),
    }


def _check_portal(path: Path, spec: ClusterSpec) -> None:
    """The portal form's defaults name a partition the cluster has and fit in it; a site's
    certificate is whole, its own, and valid now."""
    if not spec.portal.enabled:
        return
    if spec.portal.tls_pem is not None:
        where = f"{path}: portal.tls_pem"
        if not is_file(spec.portal.tls_pem):
            raise ConfigError(
                f"{where}: no file {spec.portal.tls_pem}",
                hint="a PEM file with the certificate, its chain and the private key, or leave "
                "portal.tls_pem out for a self-signed one",
            )
        check_private(where, spec.portal.tls_pem)
        portal_tls.checked_file(where, Path(spec.portal.tls_pem))
    form = spec.portal.form
    names = [p.name for p in spec.partitions]
    if form.partition is not None and form.partition not in names:
        raise ConfigError(
            f"{path}: portal.form.partition: no partition {form.partition!r} "
            f"(expected one of {', '.join(names)})"
        )
    partition = portal_partition(spec)
    most = portal_limits(spec, partition)
    for key, value in (("cpus", form.cpus), ("memory_mb", form.memory_mb), ("gpus", form.gpus)):
        if value > most[key]:
            raise ConfigError(
                f"{path}: portal.form.{key}: {value} is more than the node sets of partition "
                f"{partition.name!r} have (at most {most[key]})"
            )
