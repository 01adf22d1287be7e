"""The node health check's part of the cluster file (``health:``): Slurm's HealthCheckProgram on
every node, the checker the node images ship (images/slurmd/node-health), its thresholds, and
the site's own checks.

A failing check drains its node with a reason that starts ``health:``; a node the checker
drained is resumed once every check passes again; a node drained by anyone else (an admin, the
GPU bandwidth check, a pod's stop) is left alone."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt, StringConstraints

from slurmforge.deploy.spec.nodeset import Duration
from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import Model

# HealthCheckNodeState's words (slurm.conf(5)); CYCLE spreads the checks over the interval
NodeState = Literal["any", "alloc", "cycle", "idle", "mixed", "nondrained_idle"]
# a driver version as nvidia-smi and the libraries' names give it: 535.104.05
DRIVER_VERSION = r"^[0-9]+(\.[0-9]+){1,2}$"
CHECK_MAX = 1 << 20  # a site check's size, as a prolog's
CHECK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# what the node images run (images/slurmd/node-health) and the settings file it reads, written
# beside slurm.conf
PROGRAM = "/usr/lib/slurmforge/node-health"
SETTINGS = "health.conf"


class HealthSpec(Model):
    """The node health check: run on every node by slurmd, it drains a node that fails a check
    (the reason starts `health:`) and resumes a node it drained once every check passes."""

    enabled: StrictBool = True
    """Run the health check on every node."""
    interval: Annotated[Duration, Field(ge=5, le=86400)] = 60
    """How often each node runs it (HealthCheckInterval); slurmd also runs it when it starts."""
    node_states: tuple[NodeState, ...] = Field(default=("any",), min_length=1)
    """Which nodes run it (HealthCheckNodeState): any, or those idle, alloc, mixed,
    nondrained_idle; cycle spreads the nodes' checks over the interval."""
    max_used_percent: Annotated[StrictInt, Field(ge=1, le=100)] = 95
    """A node whose jobs' /tmp or slurmd's spool is fuller than this (percent of the file system)
    is drained; 100 checks only that they are writable."""
    resources: StrictBool = True
    """Drain a node whose container has fewer CPUs or less memory than its node set declares
    (the cgroup's limits, or the host's when it has none). false where nodes declare more than
    the host has on purpose (a local cluster larger than its machine)."""
    min_driver: Annotated[str, StringConstraints(strict=True, pattern=DRIVER_VERSION)] = "525.60.13"
    """On GPU nodes, the oldest driver taken (the default: CUDA 12's oldest); a node also needs as
    many GPUs as its gres says."""
    checks: Annotated[str, StringConstraints(strict=True, min_length=1)] | None = None
    """The site's own checks: a directory next to the cluster file (or below it) whose files are
    scripts, each run as root on the node in name order; one that exits non-zero drains the node
    with its last line of output as the reason."""

    def site_checks(self, base: Path) -> dict[str, str]:
        """Name → text of the site's checks, in the order the checker runs them."""
        if self.checks is None:
            return {}
        return {p.name: p.read_text() for p in sorted((base / self.checks).iterdir())}


def check(path: Path, health: HealthSpec) -> None:
    """The site's check directory exists next to the cluster file and holds scripts alone."""
    if health.checks is None:
        return
    directory = path.parent / health.checks
    if ".." in Path(health.checks).parts or not directory.is_dir():
        raise ConfigError(
            f"{path}: health.checks: expected a directory next to the cluster file (or below it), "
            f"got {quote(health.checks)}"
        )
    for entry in sorted(directory.iterdir()):
        name = entry.name
        if not entry.is_file() or not CHECK_NAME.fullmatch(name):
            raise ConfigError(
                f"{path}: health.checks: {quote(name)}: expected script files named with "
                "letters, digits and _ . - alone (not starting with .)"
            )
        data = entry.read_bytes()
        if len(data) > CHECK_MAX or not data.startswith(b"#!"):
            raise ConfigError(
                f"{path}: health.checks: {name}: expected a script of at most 1 MiB "
                "that starts with '#!' (the checker runs it as a program)"
            )
        try:
            data.decode()
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path}: health.checks: {name} is not UTF-8 text (byte {exc.start})"
            ) from None
