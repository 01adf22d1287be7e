"""Bringing the local cluster's containers to its files: the jail populated before anything
starts, the daemons in Slurm's order on an upgrade, changed nodes replaced after their jobs,
slurmd and slurmctld told of a changed config, and the elastic nodes Slurm has powered up
running."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import IO, Protocol

import yaml

from slurmforge import jail
from slurmforge.deploy import roles
from slurmforge.deploy.local import gpu_assign, render, roll
from slurmforge.deploy.local.compose import Project
from slurmforge.deploy.local.files import Files
from slurmforge.deploy.local.restore import Restore
from slurmforge.deploy.roles import DBD, JAIL
from slurmforge.deploy.slurm import ctl
from slurmforge.deploy.spec.model import Cluster
from slurmforge.engine import Engine
from slurmforge.errors import DeployError

UPGRADE_REASON = "slurmforge: upgrading to Slurm"


class Host(Protocol):
    """What applying asks of the local target (local/run.py's Local)."""

    cluster: Cluster
    engine: Engine
    log: IO[str]
    project: Project
    files: Files
    restoring: Restore | None
    gpus: gpu_assign.Assignment

    def sh(self, role: str, command: str) -> tuple[int, str]: ...

    def controller_sh(self, command: str) -> tuple[int, str]: ...

    def running_controller(self) -> str | None: ...

    def pyxis(self) -> bool: ...


def apply(
    local: Host,
    jail_id: str,
    secrets: dict[str, Path],
    populate: bool,
    kept: dict[str, str],
    timeout: float,
    upgrading: bool = False,
) -> None:
    """Write the files and bring the containers to them, in Slurm's order. A running cluster's
    nodes whose definition changed are replaced a few at a time, after their jobs (roll.py);
    ``kept``: the drains from before, which they keep."""
    running = local.running_controller() is not None
    changed = local.files.write(jail_id, secrets, local.gpus, local.pyxis())
    rolling = running and not upgrading  # an upgrade has drained every node and replaces all
    if populate:
        # Compose creates (and labels) the volumes; the jail is filled before anything starts.
        # Running containers whose definition changed are left as they are (a node is replaced
        # by the roll below, after its jobs); an upgrade's are made again, stopped, here.
        keep = ["--no-recreate"] if rolling else []
        local.project.compose("up", "--no-start", "--remove-orphans", *keep)
        if local.restoring is not None:
            local.restoring.volumes()  # user state and StateSave, before populate keeps them
        populate_jail(local, running)
    if local.restoring is not None:
        local.restoring.database()
    start_directory(local, timeout)
    if upgrading and local.cluster.spec.accounting.enabled:
        # Slurm's order: slurmdbd converts the database before slurmctld talks to it
        # and its own database, if it has one: the Compose file says nothing of that
        local.project.compose("up", "-d", *render.started_before(local.cluster, DBD), DBD)
        dbd_port = roles.role(DBD).ports[0]
        ctl.wait_port(functools.partial(local.sh, DBD), dbd_port.number, DBD, 600.0)
    if rolling:
        # the changed nodes are replaced after everything else runs its new definition (a
        # controller whose config directory was replaced answers only once it is made again)
        nodes = roll.changed(local.project, local.cluster)
        start_containers(local, leave=[node for names in nodes.values() for node in names])
        roll.roll(local, nodes, kept, timeout, local.log)
    else:
        start_containers(local)
    if upgrading or running:
        # also after an upgrade that stopped half-way: its nodes were left drained
        ctl.release(local.controller_sh, UPGRADE_REASON, 600.0)
    if local.files.dbd_changed and local.project.running(DBD) is not None:
        local.project.compose("restart", DBD)  # slurmdbd reads its config once, at start
    if changed and running:
        ctl.reconfigure(local.controller_sh)


def start_directory(local: Host, timeout: float) -> None:
    """The embedded directory up and answering before anything that runs SSSD starts. An SSSD
    that finds no directory as it starts is offline with nothing cached, and tries again only
    at its next retry (images/runtime/identity.sh, deploy/identity/sssd.py): a node started
    beside slapd could know no user for its first jobs after the deploy said the cluster was up
    (seen after restores here: `id` on one node found no name for a directory user's uid)."""
    if not any(r.name == roles.DIRECTORY for r in roles.running(local.cluster.spec, "local")):
        return
    local.project.compose("up", "-d", roles.DIRECTORY)
    port = roles.role(roles.DIRECTORY).ports[0]
    sh = functools.partial(local.sh, roles.DIRECTORY)
    ctl.wait_port(sh, port.number, "the directory (slapd)", timeout)


def start_containers(local: Host, leave: list[str] | None = None) -> None:
    """`up` every service but an elastic set's nodes, which are made and left to Slurm (those
    running stay running: a changed one is made again and started again), and but ``leave``
    (running nodes a roll replaces after). What the controller needs when it starts is brought
    up first (render.started_before), every time: a controller this `up` makes again starts
    after the nodes it adds or starts again, whose names it resolves as it starts."""
    elastic = [node for ns in local.cluster.spec.nodesets for node in ns.elastic_nodes]
    left = {*elastic, *(leave or [])}
    first = [s for s in render.started_before(local.cluster, roles.CONTROLLER) if s not in left]
    if first:
        local.project.compose("up", "-d", "--remove-orphans", *first)
    if not left:
        local.project.compose("up", "-d", "--remove-orphans")
        return
    services = yaml.safe_load(local.project.file.read_text())["services"]
    started = [n for n, s in services.items() if n not in left and "profiles" not in s]
    running = [node for node in elastic if local.project.running(node) is not None]
    if elastic:
        local.project.compose("up", "--no-start", "--remove-orphans", *elastic)
    local.project.compose("up", "-d", "--remove-orphans", *started)
    stopped = [node for node in running if local.project.running(node) is None]
    if stopped:
        local.project.compose("start", *stopped)


def start_powered_up(local: Host, kept: dict[str, str], timeout: float) -> None:
    """Start the elastic nodes that Slurm counts as powered up whose containers do not run (a
    restore of a backup taken while they ran makes them, like the others, without starting
    them), and wait until each has registered and is in service: what Slurm thinks runs,
    runs."""
    elastic = [node for ns in local.cluster.spec.nodesets for node in ns.elastic_nodes]
    seen = ctl.nodes(local.controller_sh) if elastic else None
    stopped = [n for n in ctl.powered_up(seen, elastic) if local.project.running(n) is None]
    if not stopped:
        return
    print(f"note: starting {', '.join(stopped)}: Slurm has them powered up", file=local.log)

    def start(names: list[str]) -> None:
        local.project.compose("start", *names)

    ctl.bring_up(local.controller_sh, stopped, start, kept, timeout)


def populate_jail(local: Host, running: bool) -> None:
    """The jail (and each other arch's /usr of it) from the images."""
    name, spec = local.cluster.name, local.cluster.spec
    images = local.cluster.images
    jail.populate(
        local.engine, images[JAIL], f"{name}_jail", spec.kept, out=local.log, skip=spec.skipped
    )
    for arch in local.cluster.other_arches:  # the /usr its nodes see the jail with
        volume = f"{name}_{render.usr_volume(arch)}"
        image = local.cluster.image(JAIL, arch)
        jail.populate(local.engine, image, volume, out=local.log, usr_only=True, skip=spec.skipped)
    # A populate replaced the jail's ld cache with the image's: running GPU workers put
    # their driver's entries back (a no-op when nothing changed).
    for node in local.gpus.nodes:
        if running and local.project.running(node) is not None:
            code, out = local.sh(node, "slurmforge-project-driver /jail")
            if code:
                raise DeployError(f"{node}: projecting the GPU driver failed: {out}")
