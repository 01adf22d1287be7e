"""The `local` target's face: what each command does with the cluster on this host. Its parts:
compose.py (the Compose CLI and the containers), preflight.py (checks before anything changes),
files.py (what is written), render.py (the Compose file), ready.py (waiting for Slurm),
restore.py (an archive put back)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO, ClassVar

from slurmforge import jail_contract, state
from slurmforge.deploy import healthcheck, load_cluster, roles
from slurmforge.deploy.backup import take
from slurmforge.deploy.identity import probe, sssd
from slurmforge.deploy.local import apply, gpu_assign, preflight, ready
from slurmforge.deploy.local import restore as local_restore
from slurmforge.deploy.local.compose import Project
from slurmforge.deploy.local.files import Files
from slurmforge.deploy.local.render import CLUSTER_LABEL, url_host
from slurmforge.deploy.roles import CONTROLLER, JAIL, LOGIN
from slurmforge.deploy.slurm import ctl, database
from slurmforge.deploy.spec.model import Cluster, check_user
from slurmforge.deploy.target import Target, Where
from slurmforge.engine import Engine
from slurmforge.errors import ConfigError


class Local(Target):
    """The `local` target: Docker Compose on this host."""

    NAME = "local"
    DEFAULT_WAIT: ClassVar[float] = 180.0
    OPTIONS = frozenset({"dry_run"})

    @classmethod
    def open(cls, where: Where) -> Local:
        cluster, _ = load_cluster(where)
        return cls(cluster, Engine.connect(), where.out_root, dry_run=where.dry_run)

    def __init__(
        self,
        cluster: Cluster,
        engine: Engine,
        out_root: Path,
        log: IO[str] | None = None,
        dry_run: bool = False,
    ) -> None:
        self.engine = engine
        self.dir = out_root / "local" / cluster.name
        self.log = log or sys.stderr
        self.dry_run = dry_run  # write what a deploy would, start and make nothing
        self.project = Project(cluster.name, self.dir / "compose.yaml", engine)
        self.restoring: local_restore.Restore | None = None  # an archive being restored
        self.bind(cluster)

    def bind(self, cluster: Cluster) -> None:
        """Operate ``cluster`` (this one, or it with other node counts after a scale)."""
        self.cluster = cluster
        self.check = preflight.Preflight(cluster, self.project)
        self.files = Files(cluster, self.dir, self.project, self.log, self.dry_run)

    @property
    def gpus(self) -> gpu_assign.Assignment:
        return self.check.gpus  # follows the node counts: a scale binds a new Preflight

    # --- what backups and the health check ask: BackupAccess ------------------------------------

    def sh(self, role: str, command: str) -> tuple[int, str]:
        return self.project.sh(self.service(role), command)

    def controller_sh(self, command: str) -> tuple[int, str]:
        return self.sh(CONTROLLER, command)

    def exec_argv(self, role: str, command: str) -> list[str]:
        return self.project.exec_argv(self.service(role), command)

    def service(self, role: str) -> str:
        """The service that answers for ``role``: with a backup slurmctld, whichever controller
        runs (Slurm's clients there reach the one in control: slurm.conf names both)."""
        return (self.running_controller() or role) if role == CONTROLLER else role

    def running_controller(self) -> str | None:
        """A slurmctld service whose container runs (the primary first), if any does."""
        return self.project.first_running(roles.controllers(self.cluster.spec))

    def secret(self, secret: roles.Secret) -> bytes | None:
        path = state.cluster_dir(self.cluster.name) / secret.file
        return path.read_bytes() if path.is_file() else None

    # --- deploy ---------------------------------------------------------------------------------

    def deploy(self, timeout: float, back_up: bool = True) -> list[str]:
        if self.dry_run:
            return self.preview()
        took = self.start(timeout, back_up=back_up)
        return _deployed(self.cluster, took, self.dir)

    def preview(self) -> list[str]:
        """`deploy --dry-run`: the same checks and the same files as a deploy, written where it
        would write them; nothing is started, populated, signalled or made (no secret, no
        volume). The directory a running cluster's containers read is refused: --out elsewhere."""
        _, ids = self.check.everything()
        if self.project.mounts_from(self.dir):
            raise ConfigError(
                f"deploy --dry-run: cluster {self.cluster.name} is running from {self.dir}, and "
                "a dry run there would change the files its containers read",
                hint="give --out DIR to write the files for review elsewhere",
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.files.write(ids[JAIL], self.files.secrets(), self.gpus, self.pyxis())
        written = sum(1 for p in self.dir.rglob("*") if p.is_file())
        return [
            f"wrote {written} files to {self.dir}; nothing was started "
            "(`invoke deploy` without --dry-run applies them)"
        ]

    def start(self, timeout: float, back_up: bool = False, upgrading: bool = False) -> float:
        """Render, populate the jail, start everything, wait for every node; seconds taken.
        ``back_up``: take one first when the deploy changes the Slurm series. ``upgrading``: a
        restore onto a newer series (the daemons start in Slurm's order)."""
        start = time.monotonic()
        series_change, ids = self.check.everything()
        upgrading = series_change or upgrading
        for note in probe.probe(self.cluster.path, self.cluster.spec):
            print(f"note: {note}", file=self.log)
        secrets = self.files.secrets()
        kept = self.drains()  # before the upgrade's hold: an operator's drains outlive both
        if upgrading and back_up and self.running_controller() is not None:
            take.before_upgrade(self)
        if upgrading and self.running_controller() is not None:
            # no job starts, and the running ones end (pending ones stay queued in StateSave)
            reason = f"{apply.UPGRADE_REASON} {self.cluster.cell.slurm}"
            ctl.hold(self.controller_sh, reason, timeout)
        apply.apply(self, ids[JAIL], secrets, True, kept, timeout, upgrading=upgrading)
        ready.wait_ready(self.project, self.cluster, timeout, kept, self.log)
        apply.start_powered_up(self, kept, timeout)
        if self.cluster.spec.accounting.enabled:  # until slurmdbd knows the cluster
            left = max(timeout - (time.monotonic() - start), 30.0)
            for line in database.setup(self.cluster, self.controller_sh, left):
                print(f"note: {line}", file=self.log)
        return time.monotonic() - start

    def pyxis(self) -> bool:
        """Whether the jail image (where srun runs) was built with pyxis (see its labels)."""
        return self.engine.carries(self.cluster.images[JAIL], "pyxis")

    def drains(self) -> dict[str, str]:
        """The drained nodes → their reasons, before a deploy or scale changes anything."""
        return ctl.drains(ctl.nodes(self.controller_sh))  # none before slurmctld runs

    # --- the other commands ---------------------------------------------------------------------

    def status(self) -> str:
        self.project.ps(f"{CLUSTER_LABEL}={self.cluster.name}")
        code, out = self.controller_sh("sinfo -N -l; echo; squeue")
        out = out if code == 0 else _unanswered(out, self.project.file.exists())
        if self.project.running(roles.PROMETHEUS) is not None:
            spec = self.cluster.spec
            host = url_host(spec.login.address)
            out += f"\n\nPrometheus: http://{host}:{spec.metrics.prometheus.port}/"
            out += f" (scrapes the exporter every {spec.metrics.prometheus.scrape_interval} s)"
        return out

    def down(self, volumes: bool) -> None:
        if self.project.file.exists():
            self.project.compose("down", "--remove-orphans", *(["--volumes"] if volumes else []))
        else:  # its files went with the checkout (or --out) it was deployed from
            ours = f"{CLUSTER_LABEL}={self.cluster.name}"
            print(f"note: {self.project.down_by_labels(volumes, ours)}", file=self.log)
        if volumes:
            state.forget_cluster(self.cluster.name, roles.SECRETS)

    def backup(self, out: Path | None, scheduled: bool = False) -> list[str]:
        if scheduled:
            return super().backup(out, scheduled)  # refused
        return take.backup(self, out)[1]

    def restore(self, archive: Path, force: bool, timeout: float) -> list[str]:
        job = local_restore.Restore(self, archive)
        upgrading = job.check(force)
        self.check.ports()
        job.secrets()
        self.restoring = job
        try:
            self.start(timeout, upgrading=upgrading)
        finally:
            self.restoring = None
        return job.summary()

    def check_deployed(self) -> None:
        if not self.project.file.exists() or self.project.container(CONTROLLER) is None:
            raise ConfigError(
                f"cluster {self.cluster.name} is not deployed here (no slurmctld container)",
                hint="run: invoke deploy",
            )

    def admit(self, new: Cluster) -> None:
        """Refuse ``new`` when this host cannot run it (more nodes than one network holds, more
        GPUs than it has)."""
        preflight.fits_one_network(new)
        gpu_assign.assign(new)

    def scale(self, new: Cluster, timeout: float) -> list[str]:
        """Apply ``new`` (this cluster with other replica counts); returns the removed nodes."""
        ids = self.check.image_ids()
        removed = sorted({n for _, n in self.cluster.nodes} - {n for _, n in new.nodes})
        kept = self.drains()
        if removed and self.running_controller() is not None:
            ctl.drain(self.controller_sh, removed, timeout)
        self.bind(new)
        apply.apply(self, ids[JAIL], self.files.secrets(), False, kept, timeout)
        ready.wait_ready(self.project, self.cluster, timeout, kept, self.log)
        return removed

    def gpu_check(self, min_busbw: float | None, command: str | None) -> list:
        return healthcheck.run(self, min_busbw, command)

    def login_argv(self, user: str | None) -> list[str]:
        # `--`: a name is never taken for an option of su (the name is checked too)
        inner = ["su", "--login", "--", check_user(user)] if user else ["/bin/bash", "-l"]
        return self.project.exec_tty_argv(LOGIN, ["chroot", jail_contract.ROOT, *inner])


def _deployed(cluster: Cluster, took: float, where: Path) -> list[str]:
    """What a deploy says once every node is up: how to log in."""
    spec = cluster.spec
    return [
        f"cluster {spec.name}: {_nodes_up(cluster)} after {took:.1f} s (manifests: {where})",
        "log in:  invoke login            (root shell in the jail on the login node)",
        "         invoke login --user NAME",
        f"         ssh -p {spec.login.port} NAME@{spec.login.address}  (key from "
        f"{'the directory' if sssd.ldap_of(spec) else 'createuser'})",
    ]


def _nodes_up(cluster: Cluster) -> str:
    """How many nodes a deploy started, and how many more Slurm starts for jobs."""
    elastic = len(cluster.nodes) - len(cluster.fixed_nodes)
    more = f", {elastic} more when jobs need them" if elastic else ""
    return f"{len(cluster.fixed_nodes)} nodes up{more}"


def _unanswered(said: str, files: bool) -> str:
    """Status's line for Slurm's commands that failed in the controller's container: slurmctld
    is away, or (``files`` gone) the daemons run on but the slurm.conf their containers mount
    went with the generated files."""
    if files:
        return f"slurmctld is not answering: {said}"
    last = said.strip().splitlines()[-1:] or [""]
    return (
        "Slurm's commands do not run in its containers: their slurm.conf is mounted from the "
        "generated files, gone with the Compose file (`invoke deploy` writes them again). "
        f"Slurm said: {last[0]}"
    )
