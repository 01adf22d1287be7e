"""The no-op fast path: answer "everything is cached" without loading the build machinery.

After a build in which every target ended built or cached, a stamp records the stat of every
input (versions.yaml, versions.lock, everything under images/, jail/, rootfs/ and the site
layer, tasks.py and slurmforge's code) and the image ID each tag pointed at. If, on the next
`invoke build` with the same selection, no input file was added, removed or touched, and every
tag still names the same image, the full path would decide "cached" for every target, so the
stamp's summary is the answer. Anything else (a touched file, a moved tag, an unreachable daemon,
a daemon not on a unix socket) falls through to the full path, which re-hashes contents and says
why.

Standard library only, the daemon asked over its unix socket (image_ids below): importing
pydantic, jinja2 and the Docker SDK costs more than the check.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from slurmforge import buildlog, state
from slurmforge.docker_host import DEFAULT_HOST

PACKAGE = Path(__file__).resolve().parent


def _snapshot(config_path: Path, extra: Iterable[str] = ()) -> dict[str, list[int]]:
    root = config_path.parent
    paths = [config_path, state.sources_lock_path(config_path), root / "tasks.py"]
    trees = [root / "images", root / "jail", root / "rootfs", PACKAGE, *map(Path, extra)]
    for tree in trees:
        paths += [p for p in tree.rglob("*") if "__pycache__" not in p.parts]
    out = {}
    for path in paths:
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        if path.is_file():
            out[str(path)] = [st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode]
    return out


def record(
    config_path: Path,
    selection: list[str],
    images: dict[str, str],
    rows: list[dict[str, Any]],
    extra: Iterable[Path] = (),
) -> None:
    """Remember a fully successful build (tag → image ID, and its summary rows); ``extra``: more
    input directories (the site layer's), watched by the next check as the project's are."""
    trees = [str(p) for p in extra]
    data = {"inputs": _snapshot(config_path, trees), "trees": trees, "images": images, "rows": rows}
    state.write_stamp(config_path, selection, data)


def selection_key(set_name: str, cells: Iterable[str], components: Iterable[str]) -> list[str]:
    """What a build's stamp is kept under: the set and the --cell/--component selection."""
    return [set_name, *sorted(cells), "|", *sorted(components)]


def check(
    config_path: Path, set_name: str, cells: Iterable[str], components: Iterable[str]
) -> list[dict[str, Any]] | None:
    """The summary rows (all cached) if nothing changed since the recorded build of this
    selection (the set, --cell and --component), else None."""
    data = state.read_stamp(config_path, selection_key(set_name, cells, components))
    if data is None or data.get("inputs") != _snapshot(config_path, data.get("trees") or ()):
        return None
    images = data.get("images") or {}
    if not images or image_ids(sorted(images)) != images:
        return None
    rows = [
        {**row, "status": "cached", "seconds": 0.0, "note": "unchanged since last build"}
        for row in data["rows"]
    ]
    buildlog.write_summary(buildlog.new_log_dir(buildlog.root(config_path.parent)), rows)
    return rows


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=5)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        sock.connect(self._path)
        self.sock = sock


def image_ids(refs: list[str]) -> dict[str, str] | None:
    """Tag → image ID for every one of ``refs``, asked of the daemon over its unix socket with
    the standard library; None when any is missing or the daemon is not on a unix socket (or
    does not answer)."""
    host = os.environ.get("DOCKER_HOST", DEFAULT_HOST)
    if not host.startswith("unix://"):
        return None
    conn = _UnixConnection(host.removeprefix("unix://"))
    ids = {}
    try:
        for ref in refs:
            conn.request("GET", f"/images/{urllib.parse.quote(ref, safe='/:')}/json")
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                return None
            ids[ref] = json.loads(body)["Id"]
    except (OSError, http.client.HTTPException, ValueError, KeyError):
        return None
    finally:
        conn.close()
    return ids
