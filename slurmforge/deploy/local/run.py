"""The `local` target's runner (local_render.py renders for it): write the Compose file and Slurm
config, apply them with the real Compose CLI, and operate the result (status, scale, down,
login)."""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, ClassVar

from slurmforge import jail, jail_contract, proc, state
from slurmforge.deploy import Target, Where, generated, load_cluster, monitoring, roles
from slurmforge.deploy.backup import take as backup
from slurmforge.deploy.identity import probe
from slurmforge.deploy.identity import sssd as identity
from slurmforge.deploy.local import gpu_assign
from slurmforge.deploy.local import render as local_render
from slurmforge.deploy.local import restore as local_restore
from slurmforge.deploy.roles import (
    CONTROLLER,
    DBD,
    DBD_CONF,
    DIRECTORY_CONF,
    IDENTITY_CONF,
    JAIL,
    JAIL_CONF,
    LOGIN,
    PROMETHEUS_CONF,
    SLURM_CONF,
)
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.deploy.slurm import ctl as slurmctl
from slurmforge.deploy.slurm import database as accounting_db
from slurmforge.deploy.slurm import siteconf, upgrade
from slurmforge.deploy.spec.model import Cluster, as_dict, check_user
from slurmforge.engine import APIError, Container, Engine
from slurmforge.errors import ConfigError, DeployError, EngineUnavailable, quote

UPGRADE_REASON = "slurmforge: upgrading to Slurm"
PROJECT_LABEL = "com.docker.compose.project"  # set by Compose v1 and v2 alike
SERVICE_LABEL = "com.docker.compose.service"


def _texts(directory: Path) -> dict[str, str]:
    """File name → content of a generated directory (empty when it is not there yet)."""
    if not directory.is_dir():
        return {}
    return {p.name: p.read_text() for p in sorted(directory.iterdir()) if p.is_file()}


def compose_cli() -> list[str]:
    """`docker compose` (v2) when the plugin answers, else `docker-compose` (v1)."""
    override = os.environ.get("SLURMFORGE_COMPOSE")
    if override:
        try:
            return shlex.split(override)
        except ValueError as exc:
            raise ConfigError(f"$SLURMFORGE_COMPOSE {quote(override)}: {exc}") from None
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise EngineUnavailable(
        "no Docker Compose CLI found (tried `docker compose` and `docker-compose`)",
        hint="run scripts/setup, or apt-get install docker-compose",
    )


class Local(Target):
    """The `local` target: Docker Compose on this host."""

    NAME = "local"
    DEFAULT_WAIT: ClassVar[float] = 180.0
    OPTIONS = frozenset({"dry_run"})

    @classmethod
    def open(cls, where: Where) -> Local:
        cluster, _ = load_cluster(where)
        local = cls(cluster, Engine.connect(), where.out_root)
        local.dry_run = where.dry_run
        return local

    def __init__(
        self, cluster: Cluster, engine: Engine, out_root: Path, log: IO[str] | None = None
    ) -> None:
        self.cluster = cluster
        self.engine = engine
        self.dir = out_root / "local" / cluster.name
        self.file = self.dir / "compose.yaml"
        self.log = log or sys.stderr
        self.dbd_changed = False  # by the last write_compose (slurmdbd reads it at start)
        self.restoring: local_restore.Restore | None = None  # an archive being restored
        self.dry_run = False  # write what a deploy would, start and make nothing

    # --- Compose and containers -------------------------------------------------------------

    def compose(self, *args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
        argv = [*compose_cli(), "-p", self.cluster.name, "-f", str(self.file), *args]
        try:
            return proc.run(argv, capture=capture)
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or "").strip().splitlines()[-1:] if capture else []
            raise DeployError(
                f"{shlex.join(argv[:2])} {' '.join(args)} failed (exit {exc.returncode})"
                + (f": {detail[0]}" if detail else "")
            ) from None

    def containers(self, service: str | None = None) -> dict[str, Container]:
        """Service name → container of this cluster (one service, or all in one call)."""
        labels = [f"{PROJECT_LABEL}={self.cluster.name}"]
        if service is not None:
            labels.append(f"{SERVICE_LABEL}={service}")
        found = self.engine.containers(labels)
        return {c.labels.get(SERVICE_LABEL, ""): c for c in found}

    def container(self, service: str) -> Container | None:
        return self.containers(service).get(service)

    def running(self, service: str) -> Container | None:
        """The service's container if it is running."""
        container = self.container(service)
        return container if container is not None and container.status == "running" else None

    def sh(self, service: str, command: str) -> tuple[int, str]:
        container = self.running(service)
        if container is None:
            return 125, f"{service} is not running"
        try:
            code, out = self.engine.exec(container, ["bash", "-c", command])
        except APIError as exc:  # e.g. it began restarting since it was listed
            return 125, f"{service}: {exc.explanation or exc}"
        return code, out.strip()

    def _tail(self, service: str, lines: int = 15) -> str:
        container = self.container(service)
        if container is None:
            return f"--- {service}: no container"
        logs = self.engine.logs(container, lines).rstrip()
        return f"--- {container.name} ({container.status}), last {lines} log lines:\n{logs}"

    # --- inputs -------------------------------------------------------------------------------

    def image_ids(self) -> dict[str, str]:
        ids = {}
        for component, ref in self.cluster.images.items():
            info = self.engine.inspect(ref)
            if info is None:
                raise ConfigError(
                    f"image {ref} ({component}) is not built",
                    hint=f"run: {self.cluster.build_hint}",
                )
            ids[component] = info.id
        return ids

    def check_ports(self) -> None:
        """The published ports (login's sshd, slurmrestd) are free, or already ours."""
        spec = self.cluster.spec
        wanted = [
            (port.publish, role.name, roles.published(spec, port))
            for role in roles.running(spec, "local")
            for port in role.ports
            if port.publish
        ]
        for key, service, port in wanted:
            mine = self.running(service)
            if mine is not None:
                bound = mine.attrs["HostConfig"].get("PortBindings") or {}
                if any(b.get("HostPort") == str(port) for v in bound.values() for b in v or []):
                    continue
            family = socket.AF_INET6 if ":" in spec.login.address else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((spec.login.address, port))
                except OSError as exc:
                    raise ConfigError(
                        f"{self.cluster.path}: {key}: {spec.login.address}:{port} is not free "
                        f"({exc.strerror})",
                        hint=f"choose another {key}, or stop what listens there",
                    ) from None

    def secrets(self) -> dict[str, Path]:
        """The files the containers are given: the munge key and, with accounting, the JWT key
        and the database password (the external database's own file, when it has one). Kept
        outside the repository; made at the first deploy and reused by every later one (a dry
        run names where they are or would be, and makes none)."""
        out = {}
        for secret, source in roles.cluster_secrets(self.cluster.spec).items():
            if source is not None:
                out[secret.file] = source
                continue
            if self.dry_run:
                out[secret.file] = state.cluster_dir(self.cluster.name) / secret.file
                continue
            out[secret.file], made = state.ensure_secret(self.cluster.name, secret.file, secret.new)
            if made:
                print(f"generated {secret.file} {out[secret.file]}", file=self.log)
        return out

    def check_database(self) -> None:
        """Refuse, before anything is made or started, a database slurmdbd could not use: an
        external one whose host does not resolve, refuses connections or refuses its login, or
        the cluster's own whose volume was created with a password other than the one kept for
        it."""
        if not accounting_db.runs_own_database(self.cluster):
            return
        where = self.engine.volume_path(f"{self.cluster.name}_{roles.DATABASE_DATA.local}")
        if where is not None:
            accounting_db.check_password(
                self.cluster, Path(where), state.cluster_dir(self.cluster.name) / "db-password"
            )

    def wait_accounting(self, timeout: float) -> None:
        """Until slurmdbd knows the cluster; then the default account exists."""
        if self.cluster.spec.accounting.enabled:
            for line in accounting_db.setup(self.cluster, self.controller_sh, max(timeout, 30.0)):
                print(f"note: {line}", file=self.log)

    def write_compose(self, jail_id: str, secrets: dict[str, Path]) -> bool:
        """Write the reviewable directory; True when the nodes' Slurm config changed (a file of
        it: slurm.conf, cgroup.conf, topology.conf, a script; slurmd and slurmctld then re-read
        it), False on the first write."""
        conf = self.dir / SLURM_CONF.local
        before = _texts(conf)
        assignment = self.gpus
        slurmconf.write(
            self.cluster,
            conf,
            self.dir / JAIL_CONF.local,
            assignment.gres_files(),
            self.pyxis(),
        )
        self.dbd_changed = False
        if self.cluster.spec.accounting.enabled:
            dbd = self.dir / DBD_CONF.local
            dbd.mkdir(parents=True, exist_ok=True)
            was = _texts(dbd)
            (dbd / "slurmdbd.conf").write_text(slurmconf.slurmdbd_conf(self.cluster))
            self.dbd_changed = bool(was) and was != _texts(dbd)
        self.write_prometheus(assignment)
        self.write_identity()
        data = local_render.render(self.cluster, secrets, jail_id, assignment)
        self.file.write_text(local_render.dump(data, str(self.cluster.path)))
        (self.dir / "model.json").write_text(json.dumps(as_dict(self.cluster), indent=2) + "\n")
        return bool(before) and before != _texts(conf)

    def write_prometheus(self, assignment: gpu_assign.Assignment) -> None:
        """The local Prometheus' configuration and rules; a running one re-reads them (SIGHUP)
        when they changed."""
        directory = self.dir / PROMETHEUS_CONF.local
        if roles.role(roles.PROMETHEUS) not in roles.running(self.cluster.spec, "local"):
            return
        directory.mkdir(parents=True, exist_ok=True)
        was = _texts(directory)
        gpu_nodes = local_render.gpu_metrics_nodes(self.cluster, assignment)
        source = str(self.cluster.path)
        config = monitoring.prometheus_config(self.cluster, gpu_nodes)
        (directory / monitoring.CONFIG_FILE).write_text(generated.dump_yaml(config, source))
        rules = monitoring.rules(self.cluster)
        (directory / monitoring.RULES_FILE).write_text(generated.dump_yaml(rules, source))
        changed = was and was != _texts(directory)
        if changed and not self.dry_run and self.running(roles.PROMETHEUS):
            self.compose("kill", "-s", "SIGHUP", roles.PROMETHEUS)

    def write_identity(self) -> None:
        """SSSD's configuration (no password in it) and the jail's sudo rule; the embedded
        directory's seed. Containers read them when they start (a change restarts them: the
        Compose file names their digests)."""
        spec = self.cluster.spec
        for config, files in (
            (IDENTITY_CONF, identity.files(spec, self.cluster.path)),
            (DIRECTORY_CONF, identity.directory_files(spec, self.cluster.path)),
        ):
            directory = self.dir / config.local
            if not files:
                continue
            directory.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (directory / name).write_text(text)

    # --- operations ---------------------------------------------------------------------------

    def deploy(self, timeout: float, back_up: bool = True) -> list[str]:
        if self.dry_run:
            return self.preview()
        took = self.start(timeout, back_up=back_up)
        spec = self.cluster.spec
        return [
            f"cluster {spec.name}: {len(self.cluster.nodes)} nodes up after {took:.1f} s "
            f"(manifests: {self.dir})",
            "log in:  invoke login            (root shell in the jail on the login node)",
            "         invoke login --user NAME",
            f"         ssh -p {spec.login.port} NAME@{spec.login.address}  (key from "
            f"{'the directory' if identity.ldap_of(spec) else 'createuser'})",
        ]

    def preview(self) -> list[str]:
        """`deploy --dry-run`: the same checks and the same files as a deploy, written where it
        would write them; nothing is started, populated, signalled or made (no secret, no
        volume). The directory a running cluster's containers read is refused: --out elsewhere."""
        self.check_upgrade()
        _ = self.gpus
        self.check_database()
        self.check_ports()
        ids = self.image_ids()
        self.check_site()
        if self.live():
            raise ConfigError(
                f"deploy --dry-run: cluster {self.cluster.name} is running from {self.dir}, and "
                "a dry run there would change the files its containers read",
                hint="give --out DIR to write the files for review elsewhere",
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.write_compose(ids[JAIL], self.secrets())
        written = sum(1 for p in self.dir.rglob("*") if p.is_file())
        return [
            f"wrote {written} files to {self.dir}; nothing was started "
            "(`invoke deploy` without --dry-run applies them)"
        ]

    def live(self) -> bool:
        """Whether a container of this cluster mounts a file or directory of ``self.dir``."""
        mine = self.dir.resolve()
        for container in self.containers().values():
            for mount in container.attrs.get("Mounts") or []:
                source = Path(mount.get("Source") or "/")
                if source == mine or mine in source.parents:
                    return True
        return False

    def start(self, timeout: float, back_up: bool = False, upgrading: bool = False) -> float:
        """Render, populate the jail, start everything, wait for every node; seconds taken.
        ``back_up``: take one first when the deploy changes the Slurm series. ``upgrading``: a
        restore onto a newer series (the daemons start in Slurm's order)."""
        start = time.monotonic()
        # before anything, even before the images are looked up
        upgrading = self.check_upgrade() or upgrading
        _ = self.gpus  # GPU node sets without GPUs are refused before anything happens
        self.check_database()
        self.check_ports()
        ids = self.image_ids()
        self.check_site()
        for note in probe.probe(self.cluster.path, self.cluster.spec):
            print(f"note: {note}", file=self.log)
        secrets = self.secrets()
        kept = self.drains()  # before the upgrade's hold: an operator's drains outlive both
        if upgrading and back_up and self.running(CONTROLLER) is not None:
            backup.before_upgrade(self)
        if upgrading:
            self.hold(timeout)
        self._apply(ids[JAIL], secrets, populate=True, upgrading=upgrading)
        self.wait_ready(timeout, kept)
        self.wait_accounting(timeout - (time.monotonic() - start))
        return time.monotonic() - start

    def check_site(self) -> None:
        """The cluster file's Slurm settings and mounts, as this target can apply them."""
        siteconf.check_cluster(self.cluster, self.engine)
        for i, mount in enumerate(self.cluster.spec.mounts):
            if mount.claim is not None:
                raise ConfigError(
                    f"{self.cluster.path}: mounts[{i}].claim: a PersistentVolumeClaim exists only "
                    "on --target k8s",
                    hint="give host_path: a directory of this host",
                )
            if not Path(mount.host_path or "").is_dir():
                raise ConfigError(
                    f"{self.cluster.path}: mounts[{i}].host_path: no directory "
                    f"{mount.host_path} on this host"
                )

    def check_upgrade(self) -> bool:
        """Refuse a Slurm release this cluster's daemons cannot move to from the one they run
        (upgrade.check); True when the deploy changes its Slurm series."""
        container = self.container(CONTROLLER)
        running = container.labels.get("io.slurmforge.slurm") if container else None
        if not running:
            return False
        return upgrade.check_cluster(self.cluster, running)

    def hold(self, timeout: float) -> None:
        """Before an upgrade replaces every node's container: no job starts, and the running
        ones end (pending jobs stay queued in StateSave and run afterwards)."""
        if self.running(CONTROLLER) is None:
            return
        reason = f"{UPGRADE_REASON} {self.cluster.cell.slurm}"
        slurmctl.hold(self.controller_sh, reason, timeout)

    def pyxis(self) -> bool:
        """Whether the jail image (where srun runs) was built with pyxis (see its labels)."""
        return self.engine.carries(self.cluster.images[JAIL], "pyxis")

    @functools.cached_property
    def gpus(self) -> gpu_assign.Assignment:
        return gpu_assign.assign(self.cluster)

    def _apply(
        self, jail_id: str, secrets: dict[str, Path], populate: bool, upgrading: bool = False
    ) -> None:
        running = self.running(CONTROLLER) is not None
        changed = self.write_compose(jail_id, secrets)
        if populate:
            # Compose creates (and labels) the volumes; the jail is filled before anything starts.
            self.compose("up", "--no-start", "--remove-orphans")
            if self.restoring is not None:
                self.restoring.volumes()  # user state and StateSave, before populate keeps them
            jail.populate(
                self.engine,
                self.cluster.images[JAIL],
                f"{self.cluster.name}_jail",
                self.cluster.spec.kept,
                out=self.log,
            )
            for arch in self.cluster.other_arches:  # the /usr its nodes see the jail with
                jail.populate(
                    self.engine,
                    self.cluster.image(JAIL, arch),
                    f"{self.cluster.name}_{local_render.usr_volume(arch)}",
                    out=self.log,
                    usr_only=True,
                )
            # A populate replaced the jail's ld cache with the image's: running GPU workers
            # put their driver's entries back (a no-op when nothing changed).
            for node in self.gpus.nodes:
                if running and self.running(node) is not None:
                    code, out = self.sh(node, "slurmforge-project-driver /jail")
                    if code:
                        raise DeployError(f"{node}: projecting the GPU driver failed: {out}")
        if self.restoring is not None:
            self.restoring.database()
        if upgrading and self.cluster.spec.accounting.enabled:
            # Slurm's order: slurmdbd converts the database before slurmctld talks to it
            self.compose("up", "-d", DBD)  # and its own database, if it has one
            dbd_port = roles.role(DBD).ports[0]
            slurmctl.wait_port(functools.partial(self.sh, DBD), dbd_port.number, DBD, 600.0)
        self.compose("up", "-d", "--remove-orphans")
        if upgrading or running:
            # also after an upgrade that stopped half-way: its nodes were left drained
            slurmctl.release(self.controller_sh, UPGRADE_REASON, 600.0)
        if self.dbd_changed and self.running(DBD) is not None:
            self.compose("restart", DBD)  # slurmdbd writes its config once, when it starts
        if changed and running:
            slurmctl.reconfigure(self.controller_sh)

    def controller_sh(self, command: str) -> tuple[int, str]:
        return self.sh(CONTROLLER, command)

    def drains(self) -> dict[str, str]:
        """The drained nodes → their reasons, before a deploy or scale changes anything."""
        return slurmctl.drains(slurmctl.nodes(self.controller_sh))  # none before slurmctld runs

    def wait_ready(self, timeout: float, kept: dict[str, str]) -> None:
        """Until every node is in service (idle, or running jobs), or in the drain ``kept`` says
        it was in before (which a note names); else name the failing ones."""
        nodes = [node for _, node in self.cluster.nodes]
        watched = {CONTROLLER, LOGIN, *nodes}
        deadline = time.monotonic() + timeout
        seen: dict[str, slurmctl.Node] | None = None
        while time.monotonic() < deadline:
            for service, container in self.containers().items():
                if service in watched and container.status in ("exited", "dead"):
                    raise DeployError(
                        f"container {container.name} stopped (exit code "
                        f"{container.attrs['State'].get('ExitCode')})\n{self._tail(service)}"
                    )
            seen = slurmctl.nodes(self.controller_sh)
            if slurmctl.ready(seen, nodes, kept):
                for line in slurmctl.kept_drained(seen or {}, nodes, kept):
                    print(f"note: {line}", file=self.log)
                return
            time.sleep(1)
        failing = [f"{CONTROLLER} (no answer)"]
        if seen is not None:
            failing = slurmctl.unready(seen, nodes, kept)
        tails = "\n".join(self._tail(shown.split()[0]) for shown in failing[:3])
        raise DeployError(f"not ready after {timeout:.0f} s: {', '.join(failing)}\n{tails}")

    def status(self) -> str:
        self.compose("ps")
        code, out = self.sh(CONTROLLER, "sinfo -N -l; echo; squeue")
        out = out if code == 0 else f"slurmctld is not answering: {out}"
        prometheus = self.running(roles.PROMETHEUS)
        if prometheus is not None:
            spec = self.cluster.spec
            host = f"[{spec.login.address}]" if ":" in spec.login.address else spec.login.address
            out += f"\n\nPrometheus: http://{host}:{spec.metrics.prometheus.port}/"
            out += f" (scrapes the exporter every {spec.metrics.prometheus.scrape_interval} s)"
        return out

    def down(self, volumes: bool) -> None:
        if not self.file.exists():
            raise ConfigError(f"{self.cluster.name} has no generated Compose file at {self.file}")
        self.compose("down", "--remove-orphans", *(["--volumes"] if volumes else []))
        if volumes:
            state.forget_cluster(self.cluster.name, roles.SECRETS)

    def volumes(self) -> list[str]:
        """The names of this cluster's volumes (Compose labels them with the project)."""
        return self.engine.volumes([f"{PROJECT_LABEL}={self.cluster.name}"])

    def remove_everything(self) -> None:
        """The cluster's containers, volumes and secrets: a restore --force replaces them."""
        if self.file.exists():
            self.down(volumes=True)
        for container in self.containers().values():
            self.engine.remove_container(container)
        for volume in self.volumes():
            self.engine.remove_volume(volume)
        state.forget_cluster(self.cluster.name, roles.SECRETS)

    def restore(self, archive: Path, force: bool, timeout: float) -> list[str]:
        return local_restore.restore(self, archive, force, timeout)

    def exec_argv(self, role: str, command: str) -> list[str]:
        container = self.running(role)
        if container is None:
            raise DeployError(f"{role} of cluster {self.cluster.name} is not running")
        return ["docker", "exec", "-i", container.name, "bash", "-c", command]

    def secret(self, secret: roles.Secret) -> bytes | None:
        path = state.cluster_dir(self.cluster.name) / secret.file
        return path.read_bytes() if path.is_file() else None

    def check_deployed(self) -> None:
        if not self.file.exists() or self.container(CONTROLLER) is None:
            raise ConfigError(
                f"cluster {self.cluster.name} is not deployed here (no slurmctld container)",
                hint="run: invoke deploy",
            )

    def admit(self, new: Cluster) -> None:
        """Refuse ``new`` when this host cannot run it (more GPUs than it has)."""
        gpu_assign.assign(new)

    def scale(self, new: Cluster, timeout: float) -> list[str]:
        """Apply ``new`` (this cluster with other replica counts); returns the removed nodes."""
        ids = self.image_ids()
        removed = sorted({n for _, n in self.cluster.nodes} - {n for _, n in new.nodes})
        kept = self.drains()
        if removed and self.running(CONTROLLER) is not None:
            slurmctl.drain(self.controller_sh, removed, timeout)
        self.cluster = new
        self.__dict__.pop("gpus", None)  # the GPU assignment follows the new node counts
        self._apply(ids[JAIL], self.secrets(), populate=False)
        self.wait_ready(timeout, kept)
        return removed

    def gpu_check(self, min_busbw: float | None, command: str | None) -> list:
        from slurmforge.deploy import healthcheck

        return healthcheck.run(self, min_busbw, command)

    def login_argv(self, user: str | None) -> list[str]:
        container = self.running(LOGIN)
        if container is None:
            raise DeployError(f"the login node of {self.cluster.name} is not running")
        # `--`: a name is never taken for an option of su (the name is checked too)
        inner = ["su", "--login", "--", check_user(user)] if user else ["/bin/bash", "-l"]
        tty = ["-it"] if sys.stdin.isatty() else ["-i"]
        return ["docker", "exec", *tty, container.name, "chroot", jail_contract.ROOT, *inner]
