"""A database a site runs outside the cluster, for the external-database tests of both targets:
the project's MariaDB image as a container of its own, published on the host's docker0 address,
which this machine, the Compose cluster's containers and the k8s lab's pods all reach."""

from __future__ import annotations

import contextlib
import fcntl
import secrets
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.ports import free_port


@dataclass
class SiteDatabase:
    host: str
    port: int
    password: Path  # the password file of its user slurm
    container: Any

    def spec(self) -> dict[str, Any]:
        """``accounting.database`` of a cluster file that uses it."""
        return {"host": self.host, "port": self.port, "password_secret": str(self.password)}

    def sql(self, statement: str) -> str:
        """``statement`` as the server's root (through its socket); its rows, tab-separated."""
        code, out = self.container.exec_run(["mariadb", "-N", "-e", statement])
        assert code == 0, out.decode()
        return out.decode()

    def jobs(self, cluster: str) -> list[str]:
        """The job IDs slurmdbd stored for ``cluster``."""
        return self.sql(f"SELECT id_job FROM slurm_acct_db.{cluster}_job_table").split()

    def change_password(self) -> None:
        """A new password for user slurm, in the server and in the file (as a site rotates it)."""
        new = secrets.token_urlsafe(24)
        self.sql(f"ALTER USER 'slurm'@'%' IDENTIFIED BY '{new}'")
        self.password.chmod(0o600)
        self.password.write_text(new)
        self.password.chmod(0o400)


SIOCGIFADDR = 0x8915  # <linux/sockios.h>: an interface's IPv4 address


def bridge_address(client) -> str:
    """The host's own address on Docker's default bridge, read from the interface itself.

    The network's IPAM record is no source for it: a freshly started dockerd lists only the
    subnet there (its ``Gateway`` key appears once the daemon has been restarted), while the
    bridge interface always carries the address containers route through."""
    options = client.networks.get("bridge").attrs.get("Options") or {}
    name = options.get("com.docker.network.bridge.name", "docker0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("256s", name.encode()[:15])
        answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
    return socket.inet_ntoa(answer[20:24])


@contextlib.contextmanager
def run(client, image: str, root: Path) -> Iterator[SiteDatabase]:
    password = root / "db-password"
    password.write_text(secrets.token_urlsafe(24))
    password.chmod(0o400)
    gateway = bridge_address(client)
    port = free_port(gateway)
    container = client.containers.run(
        image,
        detach=True,
        name=f"sfsitedb{uuid.uuid4().hex[:6]}",
        volumes={str(password): {"bind": "/run/secrets/db-password", "mode": "ro"}},
        ports={"3306/tcp": (gateway, port)},
        labels={"io.slurmforge.test": "external-database"},
    )
    try:
        deadline = time.monotonic() + 120
        # over TCP: the server that first answers on the socket, while the image makes the
        # database, listens on no port (a client arriving then is refused)
        ping = ["mariadb-admin", "--protocol=tcp", "-h", "127.0.0.1", "ping"]
        while container.exec_run(ping).exit_code != 0:
            assert time.monotonic() < deadline, container.logs().decode()[-2000:]
            time.sleep(1)
        yield SiteDatabase(gateway, port, password, container)
    finally:
        container.remove(force=True, v=True)
