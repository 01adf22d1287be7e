"""A site's own Slurm settings: the cluster file's ``slurm.conf``, ``slurm.cgroup_conf`` and
``slurm.slurmdbd_conf``, and ``slurm:`` of each node set (its NodeName line) and partition (its
PartitionName line).

Every key is checked against the parameters the cell's own Slurm parses: the tables of its
source (images/slurm-debs/conf-keys) that the controller image carries, so a typo is refused
with the file, the key and the nearest real name before anything is applied. A key slurmforge
manages (MANAGED: auth, the plugins the jail and cgroups need, paths, hosts, what the model
already says) is refused with the reason unless ``slurm.override`` lists it. A site value
replaces slurmforge's own default for that key (SchedulerParameters, SelectTypeParameters, ...).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurmforge.errors import ConfigError

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import Cluster
    from slurmforge.engine import Engine

KEYS_DIR = "/usr/share/slurmforge/conf-keys"  # in the controller image


_AUTH = "authentication is munge (and JWT with accounting), with keys slurmforge makes"
_CGROUPS = "chosen by slurm.cgroups (jobs held to their resources, the jail's step tracking)"
_HOSTS = "the daemons' addresses are set per target (Compose names, Kubernetes Services)"
_PATHS = "the images, volumes and probes use this path"
# table → lower-cased key → why slurmforge sets it
MANAGED: dict[str, dict[str, str]] = {
    "slurm.conf": {
        "clustername": "the cluster's name is the cluster file's name:",
        "slurmctldhost": _HOSTS,
        "controlmachine": _HOSTS,
        "controladdr": _HOSTS,
        "backupcontroller": _HOSTS,
        "accountingstoragehost": _HOSTS,
        "accountingstorageport": _HOSTS,
        "slurmctldport": "the images and Services expose 6817",
        "slurmdport": "the images and Services expose 6818",
        "slurmuser": "the daemons' account has the same fixed ID in every image and the jail",
        "slurmduser": "slurmd runs as root to start jobs in the jail",
        "authtype": _AUTH,
        "authalttypes": _AUTH,
        "authaltparameters": _AUTH,
        "authinfo": _AUTH,
        "credtype": _AUTH,
        "statesavelocation": f"{_PATHS} (the controller's state volume)",
        "slurmdspooldir": f"{_PATHS} (the jail plugin's spool)",
        "slurmctldpidfile": f"{_PATHS} (the readiness probe)",
        "slurmdpidfile": f"{_PATHS} (the readiness probe)",
        "plugstackconfig": "the jail plugin and pyxis load from slurmforge's plugstack.conf",
        "proctracktype": _CGROUPS,
        "taskplugin": _CGROUPS,
        "accountingstoragetype": "accounting.enabled chooses it",
        "accountingstorageenforce": "accounting.enforce sets it",
        "privatedata": "slurm.private_data sets it",
        "slurmdparameters": "config_overrides: a node's size comes from its node set",
        "grestypes": "from the node sets' gres",
        "prolog": "slurm.prolog lists the scripts",
        "epilog": "slurm.epilog lists the scripts",
        "prologflags": "slurm.node_ssh sets Contain (ssh into a job's node joins the job); an "
        "override replaces it, so keep Contain among the site's flags where node_ssh is on",
        "topologyplugin": "topology: sets it",
        "include": "the cluster file holds every setting (a file it names would not exist)",
        "nodename": "node sets are declared under nodesets: (their own settings under slurm:)",
        "partitionname": "partitions are declared under partitions: (their settings under slurm:)",
        "nodeset": "node sets are declared under nodesets:",
        "downnodes": "node sets are declared under nodesets:",
        "frontendname": "node sets are declared under nodesets:",
    },
    "node": {
        "nodename": "the node set's name",
        "nodeaddr": _HOSTS,
        "nodehostname": _HOSTS,
        "port": "the images and Services expose 6818",
        "cpus": "the node set's cpus:",
        "procs": "the node set's cpus:",
        "realmemory": "the node set's memory_mb:",
        "features": "the node set's features:",
        "gres": "the node set's gres:",
        "state": "nodes join in service (UNKNOWN until they register)",
    },
    "partition": {
        "partitionname": "the partition's name",
        "nodes": "the partition's nodesets:",
        "default": "the partition's default:",
        "maxtime": "the partition's max_time:",
    },
    "cgroup.conf": {
        "cgroupplugin": _CGROUPS,
        "ignoresystemd": "a node container has no systemd",
        "enablecontrollers": "a node container delegates its own cgroup controllers",
        "cgroupmountpoint": f"{_PATHS} (the node's entrypoint prepares /sys/fs/cgroup)",
    },
    "slurmdbd.conf": {
        "dbdhost": _HOSTS,
        "dbdaddr": _HOSTS,
        "dbdport": "the images and Services expose 6819",
        "slurmuser": "the daemons' account has the same fixed ID in every image and the jail",
        "authtype": _AUTH,
        "authalttypes": _AUTH,
        "authaltparameters": _AUTH,
        "pidfile": f"{_PATHS} (the readiness probe)",
        "storagetype": "slurmdbd stores into MySQL/MariaDB",
        "storagehost": "accounting.database (or the cluster's own MariaDB)",
        "storageport": "accounting.database (or the cluster's own MariaDB)",
        "storageuser": "accounting.database (or the cluster's own MariaDB)",
        "storageloc": "accounting.database (or the cluster's own MariaDB)",
        "storagepass": "the password comes from its secret, never a generated file",
        "storagepassscript": "the password comes from its secret, never a generated file",
        "privatedata": "slurm.private_data sets it",
    },
}


# managed keys no override can take: lines of their own, which the model writes
FIXED = {
    *(("slurm.conf", k) for k in ("nodename", "partitionname", "nodeset", "downnodes")),
    ("slurm.conf", "frontendname"),
    ("node", "nodename"),
    ("partition", "partitionname"),
}


@dataclass(frozen=True)
class ConfKeys:
    """The parameters one Slurm takes: table (slurm.conf, node, partition, cgroup.conf,
    slurmdbd.conf) → lower-cased key → the key as Slurm spells it."""

    slurm: str
    tables: dict[str, dict[str, str]]

    @classmethod
    def parse(cls, slurm: str, files: dict[str, bytes]) -> ConfKeys:
        tables = {
            name.removesuffix(".keys"): {k.lower(): k for k in data.decode().split()}
            for name, data in files.items()
        }
        return cls(slurm, tables)

    @classmethod
    def from_dir(cls, slurm: str, directory: Path) -> ConfKeys:
        return cls.parse(slurm, {p.name: p.read_bytes() for p in directory.iterdir()})

    @classmethod
    def from_image(cls, engine: Engine, ref: str, slurm: str, hint: str) -> ConfKeys:
        """The lists the controller image ``ref`` carries."""
        if engine.inspect(ref) is None:
            raise ConfigError(
                f"image {ref} (slurmctld) is not here: the cluster file's Slurm settings are "
                "checked against the parameters it lists",
                hint=f"run: {hint} (or docker pull {ref})",
            )
        files = engine.read_files(ref, KEYS_DIR)
        if not files:
            raise ConfigError(
                f"image {ref} (slurmctld) has no {KEYS_DIR}: it was built by an older slurmforge",
                hint=f"run: {hint}",
            )
        return cls.parse(slurm, files)


def check_cluster(cluster: Cluster, engine: Engine | None) -> None:
    """Check the cluster file's Slurm settings against its controller image's lists (read only
    when it has settings: a cluster without any needs no image here)."""
    if not has_settings(cluster):
        return
    ref = cluster.images["slurmctld"]
    if engine is None:
        raise ConfigError(
            f"{cluster.path}: slurm: the settings are checked against the parameters image "
            f"{ref} lists, and no Docker engine answers here to read them",
            hint="run deploy where the images were built (or pulled)",
        )
    check(cluster, ConfKeys.from_image(engine, ref, cluster.cell.slurm, cluster.build_hint))


def has_settings(cluster: Cluster) -> bool:
    """Whether the cluster file sets any Slurm parameter of its own (else nothing to check)."""
    slurm = cluster.spec.slurm
    return bool(
        slurm.override
        or slurm.conf
        or slurm.cgroup_conf
        or slurm.slurmdbd_conf
        or any(ns.slurm for ns in cluster.spec.nodesets)
        or any(p.slurm for p in cluster.spec.partitions)
    )


def check(cluster: Cluster, keys: ConfKeys) -> None:
    """Refuse an unknown key, a managed key not taken over, and an override of nothing."""
    spec = cluster.spec
    overridden = {k.lower() for k in spec.slurm.override}
    used: set[str] = set()
    # (the cluster file's key, the table of the parser that reads it, the settings)
    sections: list[tuple[str, str, dict]] = [
        ("slurm.conf", "slurm.conf", spec.slurm.conf),
        ("slurm.cgroup_conf", "cgroup.conf", spec.slurm.cgroup_conf),
        ("slurm.slurmdbd_conf", "slurmdbd.conf", spec.slurm.slurmdbd_conf),
    ]
    sections += [(f"nodesets[{i}].slurm", "node", ns.slurm) for i, ns in enumerate(spec.nodesets)]
    sections += [
        (f"partitions[{i}].slurm", "partition", p.slurm) for i, p in enumerate(spec.partitions)
    ]
    for where, table, settings in sections:
        known = keys.tables.get(table, {})
        seen: set[str] = set()
        for key in settings:
            at = f"{cluster.path}: {where}.{key}"
            if key.lower() in seen:
                raise ConfigError(f"{at}: set twice (Slurm's keys are the same in any case)")
            seen.add(key.lower())
            if key.lower() not in known:
                near = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.75)
                also = f"; did you mean {known[near[0]]}?" if near else ""
                kind = {"node": "NodeName line", "partition": "PartitionName line"}.get(
                    table, table
                )
                raise ConfigError(
                    f"{at}: Slurm {keys.slurm} takes no {kind} parameter {key!r}{also}"
                )
            why = MANAGED.get(table, {}).get(key.lower())
            if why and (table, key.lower()) in FIXED:
                raise ConfigError(f"{at}: {known[key.lower()]} cannot be set here ({why})")
            if why and key.lower() not in overridden:
                raise ConfigError(
                    f"{at}: slurmforge manages {known[key.lower()]} ({why})",
                    hint=f"to take it over, add {known[key.lower()]} to slurm.override "
                    "(docs/how-to/site-configuration.md)",
                )
            if why:
                used.add(key.lower())
    for i, key in enumerate(spec.slurm.override):
        if key.lower() not in used:
            raise ConfigError(
                f"{cluster.path}: slurm.override[{i}]: {key!r} is not a key slurmforge manages "
                "that the cluster file sets; expected one of the managed keys it sets"
            )


def render_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "YES" if value else "NO"
    return str(value)


def line_attrs(ours: dict[str, str], site: dict[str, str | int | bool]) -> str:
    """A NodeName or PartitionName line's ``Key=value`` pairs: ours, each replaced where the
    site sets the same key (any case), then the site's others."""
    lowered = {k.lower() for k in site}
    pairs = [f"{k}={v}" for k, v in ours.items() if k.lower() not in lowered]
    pairs += [f"{k}={render_value(v)}" for k, v in site.items()]
    return " ".join(pairs)


def merge(text: str, site: dict[str, str | int | bool], source: str) -> str:
    """A generated file with the site's settings: each of our own lines for a key the site sets
    is dropped, and the site's lines are added where the file marks them (``# @site``), else at
    its end."""
    if not site:
        return text.replace("# @site\n", "")
    lowered = {k.lower() for k in site}
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if not (m := re.match(r"([A-Za-z][A-Za-z0-9_]*)=", line)) or m[1].lower() not in lowered
    ]
    block = f"# The cluster file's own settings ({source}):\n" + "".join(
        f"{k}={render_value(v)}\n" for k, v in site.items()
    )
    out = "".join(kept)
    return out.replace("# @site\n", block) if "# @site\n" in out else out + block
