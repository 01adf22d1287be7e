"""Trackable resources (TRES): the ones a cluster's slurmdbd will know, and the check that a
QoS or account limit names only those.

slurmctld registers its TRES in slurmdbd when it starts: Slurm's defaults, which cannot be turned
off, and what slurm.conf's AccountingStorageTRES adds. sacctmgr refuses a limit on any other
(``no TRES known by type gres/tpu``), and does so only after `add qos` has made the record, so
the cluster file's limits are checked against that list when the file is read.

slurmforge tracks every GRES the node sets declare (with and without its type, as Slurm's
manual shows for GPU types) and every license the site's ``Licenses`` declares; a site that sets
AccountingStorageTRES itself chooses the list instead.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from slurmforge.errors import ConfigError

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec

# DEFAULT_ACCOUNTING_TRES of src/common/read_config.h (every release from 23.11 to 26.05)
DEFAULTS = ("billing", "cpu", "energy", "fs/disk", "mem", "node", "pages", "vmem")
# read_config.c adds these two wherever gres/gpu is tracked
GPU_USAGE = ("gres/gpumem", "gres/gpuutil")


def _site_value(spec: ClusterSpec, key: str) -> str | None:
    value = next((v for k, v in spec.slurm.conf.items() if k.lower() == key.lower()), None)
    return None if value is None else str(value)


def licenses(spec: ClusterSpec) -> list[str]:
    """The license names of the site's ``Licenses=name[:count],…`` (``*`` is the old separator)."""
    value = _site_value(spec, "Licenses") or ""
    return [re.split(r"[:*]", item, maxsplit=1)[0] for item in value.split(",") if item]


def tracked(spec: ClusterSpec) -> list[str]:
    """What slurmforge writes as AccountingStorageTRES: each GRES name (and name:type) the node
    sets declare, each declared license."""
    gres: set[str] = set()
    for ns in spec.nodesets:
        for entry in ns.gres:  # name[:type]:count
            name, *kind, _count = entry.split(":")
            gres.add(f"gres/{name}")
            gres.update(f"gres/{name}:{k}" for k in kind)
    return [*sorted(gres), *(f"license/{n}" for n in licenses(spec))]


def known(spec: ClusterSpec) -> list[str]:
    """Every TRES the cluster's slurmdbd will have, in lower case, sorted."""
    site = _site_value(spec, "AccountingStorageTRES")
    extra = [t for t in site.split(",") if t] if site is not None else tracked(spec)
    names = {*DEFAULTS, *(t.lower() for t in extra)}
    if "gres/gpu" in names:
        names.update(GPU_USAGE)
    return sorted(names)


def check(path: Path, spec: ClusterSpec) -> None:
    """Each TRES a declared QoS or account limits is one the cluster will know."""
    have = known(spec)
    for kind, records in (("qos", spec.accounting.qos), ("accounts", spec.accounting.accounts)):
        for i, record in enumerate(records):
            for key, value in record.model_dump(exclude_none=True).items():
                if "TRES" not in key:
                    continue
                for item in value.split(","):
                    name = item.rsplit("=", 1)[0]
                    if name.lower() in have:
                        continue
                    near = difflib.get_close_matches(name.lower(), have, n=1, cutoff=0.5)
                    hint = f"did you mean {near[0]!r}? " if near else ""
                    raise ConfigError(
                        f"{path}: accounting.{kind}[{i}].{key}: unknown TRES {name!r}; {hint}"
                        f"this cluster tracks {', '.join(have)}"
                    )
