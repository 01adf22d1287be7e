"""Waiting for a local cluster to be in service: its nodes as Slurm sees them, then the services
Slurm does not see (the portal, REST, the database, ...) by their roles' probes."""

from __future__ import annotations

import shlex
import time
from typing import IO

from slurmforge.deploy import roles
from slurmforge.deploy.local.compose import Project
from slurmforge.deploy.roles import CONTROLLER, LOGIN
from slurmforge.deploy.slurm import ctl
from slurmforge.deploy.spec.model import Cluster
from slurmforge.engine import Container
from slurmforge.errors import DeployError


def wait_ready(
    project: Project, cluster: Cluster, timeout: float, kept: dict[str, str], log: IO[str]
) -> None:
    """Until every node is in service (idle, or running jobs), or in the drain ``kept`` says
    it was in before (which a note names); else name the failing ones, with their last logs.
    An elastic set's nodes are Slurm's to start: only those that always run are waited for."""
    nodes = [node for _, node in cluster.fixed_nodes]
    controllers = roles.controllers(cluster.spec)
    watched = {*controllers, LOGIN, *nodes}
    deadline = time.monotonic() + timeout
    seen: dict[str, ctl.Node] | None = None

    answering = CONTROLLER  # a controller whose container runs, from each round's listing

    def controller_sh(command: str) -> tuple[int, str]:
        return project.sh(answering, command)

    while time.monotonic() < deadline:
        found = project.containers()
        _none_stopped(project, found, watched)
        running = [c for c in controllers if c in found and found[c].status == "running"]
        answering = running[0] if running else CONTROLLER
        seen = ctl.nodes(controller_sh)
        if ctl.ready(seen, nodes, kept):
            for line in ctl.kept_drained(seen or {}, nodes, kept):
                print(f"note: {line}", file=log)
            _wait_probed(project, cluster, deadline)
            return
        time.sleep(1)
    failing = [f"{CONTROLLER} (no answer)"]
    if seen is not None:
        failing = ctl.unready(seen, nodes, kept)
    tails = "\n".join(project.tail(shown.split()[0]) for shown in failing[:3])
    raise DeployError(f"not ready after {timeout:.0f} s: {', '.join(failing)}\n{tails}")


def _wait_probed(project: Project, cluster: Cluster, deadline: float) -> None:
    """Until each service but slurmctld passes its role's probe (the hub listens, sshd runs,
    slurmrestd listens, ...): a deploy that returns leaves nothing a user opens still starting."""
    waiting = {
        role.name: shlex.join(role.probe.argv())
        for role in roles.running(cluster.spec, "local")
        if role.workload == "daemon" and role.probe is not None and role.name != CONTROLLER
    }
    while waiting:
        _none_stopped(project, project.containers(), set(waiting))
        waiting = {name: c for name, c in waiting.items() if project.sh(name, c)[0] != 0}
        if not waiting:
            return
        if time.monotonic() >= deadline:
            names = ", ".join(waiting)
            tails = "\n".join(project.tail(name) for name in list(waiting)[:3])
            raise DeployError(f"not ready: {names} (its readiness check fails)\n{tails}")
        time.sleep(1)


def _none_stopped(project: Project, found: dict[str, Container], services: set[str]) -> None:
    """Refuse at once, with its last logs, a container of ``services`` that has stopped."""
    for service, container in found.items():
        if service in services and container.status in ("exited", "dead"):
            inspected = project.container(service, full=True)  # the listing has no exit code
            code = inspected.attrs["State"].get("ExitCode") if inspected else "?"
            raise DeployError(
                f"container {container.name} stopped (exit code {code})\n{project.tail(service)}"
            )
