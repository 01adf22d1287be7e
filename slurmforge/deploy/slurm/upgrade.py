"""Moving a running cluster to another Slurm release, the way Slurm allows it.

Slurm reads the state files, RPCs and database of a few releases back and nothing older, and
never goes back: a database or StateSave a newer slurmdbd or slurmctld has written is not read by
an older one. Up to 24.05 a release took the two before it; from 24.11 on, the three before it
(SLURM_MIN_PROTOCOL_VERSION in src/common/slurm_protocol_common.h: 24.05's is 23.02's, 25.11's is
three back). An upgrade goes daemon by daemon in Slurm's order: slurmdbd (which converts the
database when it starts), then slurmctld (which converts StateSave), then the nodes and clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge.errors import ConfigError

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import Cluster

# Slurm's major releases before the six-monthly YY.05/YY.11 cadence that began with 24.05
_BEFORE_CADENCE = ("20.02", "20.11", "21.08", "22.05", "23.02", "23.11")


def series(version: str) -> str:
    """'24.05.8' → '24.05'."""
    return ".".join(version.split(".")[:2])


def _index(major: str) -> int:
    """Position of a major release in Slurm's release sequence."""
    if major in _BEFORE_CADENCE:
        return _BEFORE_CADENCE.index(major)
    year, month = (int(p) for p in major.split("."))
    if year < 24 or month not in (5, 11):
        raise ValueError(f"not a Slurm major release: {major}")
    return len(_BEFORE_CADENCE) + (year - 24) * 2 + (month == 11)


def reach(major: str) -> int:
    """How many releases back ``major`` upgrades from: two up to 24.05, three from 24.11."""
    return 3 if _index(major) > _index("24.05") else 2


def _known() -> list[str]:
    return [*_BEFORE_CADENCE, *(f"{y}.{m:02d}" for y in range(24, 100) for m in (5, 11))]


def _can(old: str, new: str) -> bool:
    return 0 < _index(new) - _index(old) <= reach(new)


def upgrades_from(major: str) -> list[str]:
    """The major releases a ``major`` cluster can be upgraded from, oldest first."""
    return [r for r in _known()[: _index(major)] if _can(r, major)]


def check(where: str, name: str, running: str, wanted: str) -> bool:
    """Refuse a move from Slurm ``running`` to ``wanted`` that Slurm itself cannot make, naming
    ``where`` (the cluster file and key that chose ``wanted``); True when it changes the major
    release (an upgrade, done daemon by daemon)."""
    old, new = series(running), series(wanted)
    if old == new:
        return False
    for version, major in ((running, old), (wanted, new)):
        try:
            _index(major)
        except ValueError:
            raise ConfigError(
                f"{where}: Slurm {version} is no release of Slurm's sequence (20.02 … 23.11, then "
                "YY.05 and YY.11): slurmforge cannot tell whether Slurm upgrades across it"
            ) from None
    if _index(new) < _index(old):
        raise ConfigError(
            f"{where}: cluster {name} runs Slurm {running}; Slurm cannot go back to {wanted} (its "
            f"database and StateSave were converted for {old} and older daemons do not read them)",
            hint=f"deploy a cell of Slurm {old} or newer",
        )
    if not _can(old, new):
        # the newest release this cluster can move to on the way
        step = max((r for r in _known()[: _index(new)] if _can(old, r)), key=_index)
        raise ConfigError(
            f"{where}: cluster {name} runs Slurm {running}; Slurm {new} upgrades only from "
            f"{', '.join(upgrades_from(new))} (its daemons read no older state, RPCs or database)",
            hint=f"upgrade through Slurm {step} first: deploy a cell of it, then this one",
        )
    return True


def check_cluster(cluster: Cluster, running: str) -> bool:
    """``check`` for a cluster whose daemons run Slurm ``running``, blaming its images key."""
    where = f"{cluster.path}: images"
    return check(where, cluster.name, running, cluster.cell.slurm)
