"""Slurm operations a deployment runs in slurmctld's container, whichever target holds it.

Each takes ``sh``: a command line in that container → (exit code, output).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from slurmforge.errors import DeployError

Shell = Callable[[str], tuple[int, str]]
IN_SERVICE = {"idle", "mix", "alloc", "comp"}


def node_states(sh: Shell) -> dict[str, str] | None:
    """Node → its short sinfo state (idle, down*, drain…); None when slurmctld does not answer."""
    code, out = sh("sinfo -h -N -o '%N %t'")
    if code:
        return None
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def wait_in_service(sh: Shell, nodes: list[str], timeout: float) -> dict[str, str] | None:
    """Poll until every node is in service (idle, or running jobs); the last states seen, which
    the caller checks (None: slurmctld never answered)."""
    deadline = time.monotonic() + timeout
    states = node_states(sh)
    while not in_service(states, nodes) and time.monotonic() < deadline:
        time.sleep(1)
        states = node_states(sh)
    return states


def in_service(states: dict[str, str] | None, nodes: list[str]) -> bool:
    return states is not None and all(states.get(n) in IN_SERVICE for n in nodes)


def drain(sh: Shell, nodes: list[str], timeout: float) -> None:
    """Drain ``nodes`` (no new jobs start there) and wait until none of their jobs runs."""
    names = ",".join(nodes)
    code, out = sh(f"scontrol update NodeName={names} State=DRAIN Reason='slurmforge scale'")
    if code:
        raise DeployError(f"could not drain {names}: {out}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, out = sh(f"squeue -h -w {names} -o %i")
        if code == 0 and not out:
            return
        time.sleep(2)
    raise DeployError(f"jobs still running on {names} after {timeout:.0f} s: {out}")


def reconfigure(sh: Shell) -> None:
    """slurmctld and every slurmd re-read their configuration (nodes added or removed)."""
    code, out = sh("scontrol reconfigure")
    if code:
        raise DeployError(f"scontrol reconfigure failed: {out}")
