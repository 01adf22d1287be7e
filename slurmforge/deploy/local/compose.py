"""The local target's seam to Docker Compose and the cluster's containers: the Compose CLI on
the cluster's file, and its containers and volumes found by the labels Compose gives them."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slurmforge import proc
from slurmforge.engine import APIError, Container, Engine
from slurmforge.errors import ConfigError, DeployError, EngineUnavailable, quote
from slurmforge.summary import table

PROJECT_LABEL = "com.docker.compose.project"  # set by Compose v1 and v2 alike
SERVICE_LABEL = "com.docker.compose.service"
STOP_TIMEOUT = 10  # seconds from SIGTERM to SIGKILL, Compose's own default


def compose_cli() -> list[str]:
    """`docker compose` (v2) when the plugin answers, else `docker-compose` (v1)."""
    override = os.environ.get("SLURMFORGE_COMPOSE")
    if override:
        try:
            return shlex.split(override)
        except ValueError as exc:
            raise ConfigError(f"$SLURMFORGE_COMPOSE {quote(override)}: {exc}") from None
    if _plugin_answers():
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise EngineUnavailable(
        "no Docker Compose CLI found (tried `docker compose` and `docker-compose`)",
        hint="run scripts/setup, or apt-get install docker-compose",
    )


@functools.cache
def _plugin_answers() -> bool:
    """Whether `docker compose` (v2) answers: asked once a process, not before every Compose
    command (a deploy runs several)."""
    if not shutil.which("docker"):
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    return probe.returncode == 0


class Project:
    """One cluster's Compose project: ``name`` is the project, ``file`` its Compose file."""

    def __init__(self, name: str, file: Path, engine: Engine) -> None:
        self.name = name
        self.file = file
        self.engine = engine

    def compose(self, *args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
        argv = [*compose_cli(), "-p", self.name, "-f", str(self.file), *args]
        try:
            return proc.run(argv, capture=capture)
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or "").strip().splitlines()[-1:] if capture else []
            raise DeployError(
                f"{shlex.join(argv[:2])} {' '.join(args)} failed (exit {exc.returncode})"
                + (f": {detail[0]}" if detail else "")
            ) from None

    def containers(self, service: str | None = None, full: bool = False) -> dict[str, Container]:
        """Service name → container of this cluster (one service, or all in one call), as the
        engine lists them; ``full``: with each one's whole record (its State, HostConfig)."""
        labels = [f"{PROJECT_LABEL}={self.name}"]
        if service is not None:
            labels.append(f"{SERVICE_LABEL}={service}")
        found = self.engine.containers(labels, full)
        return {c.labels.get(SERVICE_LABEL, ""): c for c in found}

    def container(self, service: str, full: bool = False) -> Container | None:
        return self.containers(service, full).get(service)

    def running(self, service: str) -> Container | None:
        """The service's container if it is running."""
        container = self.container(service)
        return container if container is not None and container.status == "running" else None

    def first_running(self, services: list[str]) -> str | None:
        """The first of ``services`` whose container is running, if any."""
        found = self.containers()
        return next((s for s in services if s in found and found[s].status == "running"), None)

    def down_by_labels(self, volumes: bool, ours: str) -> str:
        """`compose down` for a cluster whose Compose file is gone (its checkout deleted, or
        deployed with another --out): its containers, found by the project's label and ``ours``
        (``key=value``, the label slurmforge gives them), stopped together as Compose stops them
        and removed; then its networks and, with ``volumes``, its volumes. Says what it removed;
        refused when nothing of the cluster is here."""
        made = self.engine.containers([f"{PROJECT_LABEL}={self.name}", ours], full=False)
        with ThreadPoolExecutor(max(len(made), 1)) as pool:
            list(pool.map(lambda c: self.engine.remove_container(c, STOP_TIMEOUT), made))
        networks = self.engine.networks([f"{PROJECT_LABEL}={self.name}"])
        for network in networks:
            self.engine.remove_network(network)
        gone = self.volumes() if volumes else []
        for volume in gone:
            self.engine.remove_volume(volume)
        counts = [(len(made), "container"), (len(networks), "network"), (len(gone), "volume")]
        removed = [f"{n} {kind}{'s' * (n != 1)}" for n, kind in counts if n]
        if removed:
            return (
                f"no Compose file at {self.file}; removed what Docker labels as cluster "
                f"{self.name}'s: {', '.join(removed)}"
            )
        kept = [] if volumes else self.volumes()
        if kept:  # taken down before, without --volumes: nothing to do, as for Compose's down
            return f"no container of cluster {self.name} is here; its {len(kept)} volumes are kept"
        raise self._absent()

    def ps(self, ours: str) -> None:
        """`compose ps`; for a cluster whose Compose file is gone, the same listing from the
        labels Docker keeps on its containers (``ours`` as for ``down_by_labels``), after a note
        that says so. Refused when nothing of the cluster is here."""
        if self.file.exists():
            self.compose("ps")
            return
        made = self.engine.containers([f"{PROJECT_LABEL}={self.name}", ours], full=False)
        if not made and not self.volumes():
            raise self._absent()
        rows = [
            [c.name, c.labels.get(SERVICE_LABEL, ""), c.attrs.get("Status", c.status), _ports(c)]
            for c in sorted(made, key=lambda c: c.name)
        ]
        print(
            f"note: no Compose file at {self.file}; cluster {self.name}'s containers, as Docker "
            "lists them by their labels:",
            file=sys.stderr,
        )
        print(table(rows, ["NAME", "SERVICE", "STATUS", "PORTS"]), flush=True)

    def _absent(self) -> ConfigError:
        return ConfigError(
            f"{self.name} has no generated Compose file at {self.file}"
            ", and nothing of it is on this host",
            hint="check --cluster (the cluster file, whose name is looked for) and --out",
        )

    def volumes(self) -> list[str]:
        """The names of this cluster's volumes (Compose labels them with the project)."""
        return self.engine.volumes([f"{PROJECT_LABEL}={self.name}"])

    def sh(self, service: str, command: str) -> tuple[int, str]:
        """Run ``command`` with bash in the service's container: exit status, output."""
        container = self.running(service)
        if container is None:
            return 125, f"{service} is not running"
        try:
            code, out = self.engine.exec(container, ["bash", "-c", command])
        except APIError as exc:  # e.g. it began restarting since it was listed
            return 125, f"{service}: {exc.explanation or exc}"
        return code, out.strip()

    def exec_argv(self, service: str, command: str) -> list[str]:
        """`docker exec` of ``command`` with bash in the running service's container."""
        container = self.running(service)
        if container is None:
            raise DeployError(f"{service} of cluster {self.name} is not running")
        return ["docker", "exec", "-i", container.name, "bash", "-c", command]

    def exec_tty_argv(self, service: str, argv: list[str]) -> list[str]:
        """`docker exec` of ``argv`` in the running service's container, with a terminal when
        this process has one."""
        container = self.running(service)
        if container is None:
            raise DeployError(f"the {service} node of {self.name} is not running")
        tty = ["-it"] if sys.stdin.isatty() else ["-i"]
        return ["docker", "exec", *tty, container.name, *argv]

    def tail(self, service: str, lines: int = 15) -> str:
        """The service's last log lines, headed by its container's name and status."""
        container = self.container(service)
        if container is None:
            return f"--- {service}: no container"
        logs = self.engine.logs(container, lines).rstrip()
        return f"--- {container.name} ({container.status}), last {lines} log lines:\n{logs}"

    def mounts_from(self, directory: Path) -> bool:
        """Whether a container of this project mounts ``directory`` or something below it."""
        mine = directory.resolve()
        for container in self.containers().values():
            for mount in container.attrs.get("Mounts") or []:
                source = Path(mount.get("Source") or "/")
                if source == mine or mine in source.parents:
                    return True
        return False


def _ports(container: Container) -> str:
    """A listed container's ports as `docker ps` writes them (published: host address and
    port first)."""
    shown = []
    for port in container.attrs.get("Ports") or []:
        inside = f"{port.get('PrivatePort')}/{port.get('Type', 'tcp')}"
        published = port.get("PublicPort")
        shown.append(f"{port.get('IP', '')}:{published}->{inside}" if published else inside)
    return ", ".join(sorted(set(shown)))
