"""A real registry for tests and benchmarks: Debian's `docker-registry` (distribution v2) on
127.0.0.1 with filesystem storage in a directory, optionally behind htpasswd basic auth, and a
TCP proxy that drops the first connections it accepts."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.common import dump_yaml
from tests.ports import free_port

BINARY = "docker-registry"


@contextmanager
def registry(root: Path, users: dict[str, str] | None = None) -> Iterator[str]:
    """Serve a registry storing under ``root``; yields its host:port."""
    binary = shutil.which(BINARY) or f"/usr/bin/{BINARY}"
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    config: dict = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    if users:
        import bcrypt

        lines = [
            f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(5)).decode()}" for u, p in users.items()
        ]
        (root / "htpasswd").write_text("\n".join(lines) + "\n")
        config["auth"] = {"htpasswd": {"realm": "slurmforge-test", "path": str(root / "htpasswd")}}
    (root / "config.yml").write_text(dump_yaml(config))
    log = open(root / "registry.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=log, stderr=log)
    try:
        host = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://{host}/v2/", timeout=1)
                break
            except urllib.error.HTTPError:  # 401 with auth: it answers
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"registry did not start: {(root / 'registry.log').read_text()}"
                    ) from None
                time.sleep(0.1)
        yield host
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


class DroppingProxy:
    """Forwards 127.0.0.1:<port> to ``target``, closing the first ``drop`` connections at once."""

    def __init__(self, target: str, drop: int) -> None:
        self.target = target.rsplit(":", 1)[0], int(target.rsplit(":", 1)[1])
        self.drop = drop
        self.dropped = 0
        self.served = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.host = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.dropped < self.drop:
                self.dropped += 1
                conn.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                conn.close()  # RST: "connection reset by peer"
                continue
            self.served += 1
            upstream = socket.create_connection(self.target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop = True
        self.sock.close()
