"""The fetcher against a real HTTP server on 127.0.0.1 (no Docker)."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from slurmforge import config, versions
from slurmforge.errors import ChecksumError, ConfigError, SourceError
from slurmforge.pins import Source
from slurmforge.sources import Cache, mirror_url
from slurmforge.state import read_sources_lock, write_sources_lock

PAYLOAD = b"slurm tarball bytes\n" * 5000
SHA = hashlib.sha256(PAYLOAD).hexdigest()
WRONG = "0" * 64


class _Handler(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        if self.path.endswith("/slurm.tar.gz"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD)
        elif self.path.endswith("/truncated.tar.gz"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD[: len(PAYLOAD) // 3])
            self.close_connection = True
        else:
            self.send_error(404, "Not Found")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cfg(shipped: dict, write_config) -> config.Config:
    return versions.load(write_config(shipped))


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_good_file_is_cached_by_checksum(tmp_path: Path, server: str, cfg) -> None:
    cache = Cache(tmp_path / "sources")
    src = Source(url=f"{server}/up/slurm.tar.gz", sha256=SHA)
    got = cache.fetch(cfg, [src])
    assert got.path == tmp_path / "sources" / SHA / "slurm.tar.gz"
    assert got.path.read_bytes() == PAYLOAD
    again = cache.fetch(cfg, [src])
    assert again.path == got.path
    assert _Handler.requests == ["/up/slurm.tar.gz"]  # the second fetch was a cache hit


def test_wrong_checksum_refuses_and_keeps_nothing(tmp_path: Path, server: str, cfg) -> None:
    cache = Cache(tmp_path / "sources")
    url = f"{server}/up/slurm.tar.gz"
    with pytest.raises(ChecksumError) as err:
        cache.fetch(cfg, [Source(url=url, sha256=WRONG)])
    assert url in err.value.message
    assert f"expected sha256 {WRONG}" in err.value.message
    assert f"got {SHA}" in err.value.message
    assert err.value.exit_code == 2
    assert _files(tmp_path / "sources") == []


def test_truncated_transfer_is_an_error(tmp_path: Path, server: str, cfg) -> None:
    cache = Cache(tmp_path / "sources")
    with pytest.raises(SourceError, match=r"truncated transfer|transfer failed"):
        cache.fetch(cfg, [Source(url=f"{server}/up/truncated.tar.gz", sha256=SHA)])
    assert _files(tmp_path / "sources") == []


def test_404_names_the_url(tmp_path: Path, server: str, cfg) -> None:
    cache = Cache(tmp_path / "sources")
    with pytest.raises(SourceError, match=r"/up/missing.tar.gz: HTTP 404") as err:
        cache.fetch(cfg, [Source(url=f"{server}/up/missing.tar.gz", sha256=SHA)])
    assert err.value.exit_code == 1


def test_falls_back_to_the_next_source(tmp_path: Path, server: str, cfg) -> None:
    cache = Cache(tmp_path / "sources")
    got = cache.fetch(
        cfg,
        [
            Source(url=f"{server}/a/missing.tar.gz", sha256=SHA),
            Source(url=f"{server}/b/slurm.tar.gz", sha256=SHA),
        ],
    )
    assert got.source.url.endswith("/b/slurm.tar.gz")


def test_mirror_url_rewrites_host_and_path(tmp_path: Path, server: str, cfg) -> None:
    upstream = "https://download.schedmd.com/slurm/slurm.tar.gz"
    assert mirror_url(upstream, "http://mirror.local/srcs/") == (
        "http://mirror.local/srcs/download.schedmd.com/slurm/slurm.tar.gz"
    )
    assert mirror_url(upstream, None) == upstream
    cache = Cache(tmp_path / "sources")
    cache.fetch(cfg, [Source(url=upstream, sha256=SHA)], mirror=server)
    assert _Handler.requests == ["/download.schedmd.com/slurm/slurm.tar.gz"]


def test_mirror_directory(tmp_path: Path, cfg) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "download.schedmd.com/slurm").mkdir(parents=True)
    (mirror / "download.schedmd.com/slurm/slurm.tar.gz").write_bytes(PAYLOAD)
    cache = Cache(tmp_path / "sources")
    src = Source(url="https://download.schedmd.com/slurm/slurm.tar.gz", sha256=SHA)
    assert cache.fetch(cfg, [src], mirror=str(mirror)).path.read_bytes() == PAYLOAD


def test_what_the_mirror_lacks_comes_from_the_origin(tmp_path: Path, server: str, cfg) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()  # holds nothing
    cache = Cache(tmp_path / "sources")
    src = Source(url=f"{server}/up/slurm.tar.gz", sha256=SHA)
    got = cache.fetch(cfg, [src], mirror=str(mirror))
    assert got.path.read_bytes() == PAYLOAD and _Handler.requests == ["/up/slurm.tar.gz"]
    with pytest.raises(SourceError) as err:  # neither has it: both failures are named
        cache.fetch(cfg, [Source(url=f"{server}/up/gone.tar.gz", sha256=SHA)], mirror=str(mirror))
    assert str(mirror) in err.value.message and "HTTP 404" in err.value.message


def test_unpinned_is_refused_unless_allowed(tmp_path: Path, server: str, cfg) -> None:
    cache = Cache(tmp_path / "sources")
    src = Source(url=f"{server}/up/slurm.tar.gz", sha256="unpinned")
    with pytest.raises(ConfigError, match="sha256 is 'unpinned'; refusing") as err:
        cache.fetch(cfg, [src])
    assert "--allow-unpinned" in (err.value.hint or "")
    assert _Handler.requests == []
    assert cache.fetch(cfg, [src], allow_unpinned=True).sha256 == SHA
    trusted = cache.fetch(cfg, [src], trusted=(server + "/up/",))
    assert trusted.sha256 == SHA


def test_lock_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "versions.yaml"
    write_sources_lock(path, {"https://a/x.tar.gz": SHA})
    write_sources_lock(path, {"https://b/y.tar.gz": WRONG})
    assert read_sources_lock(path) == {"https://a/x.tar.gz": SHA, "https://b/y.tar.gz": WRONG}
