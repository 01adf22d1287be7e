"""Every file slurmforge keeps between runs: where it lives, what it holds, how it is written.

| file | where | written by | read by |
| --- | --- | --- | --- |
| versions.lock | beside versions.yaml | `invoke lock`, fetch | config (unpinned sources) |
| images.lock.json | build/ | `invoke push` | the k8s renderer (digest-pinned refs) |
| tested.json | build/ | the image tier | `invoke push` (only tested images) |
| build stamps | .cache/state/build-<key>.json | `invoke build` | the no-op fast path |
| replicas.json, munge.key | $SLURMFORGE_STATE_DIR/<cluster>/ | scale, deploy | deploy, scale |
| backups/*.tar | $SLURMFORGE_STATE_DIR/<cluster>/ | backup, deploy (upgrade) | restore |

Every write replaces the file whole (a temporary file beside it, then a rename): a reader sees
the old content or the new, never a part. A new state file gets its path, reader and writer here.
Standard library only: the no-op fast path imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmforge.errors import ConfigError, quote

SOURCES_LOCK = "versions.lock"
IMAGES_LOCK = Path("build") / "images.lock.json"
TESTED = Path("build") / "tested.json"
SCALE_FILE = "replicas.json"


def write_private(path: Path, data: bytes) -> None:
    """``data`` into ``path``, mode 0600 from the start: written beside it and renamed over
    it, so never partial."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# -- versions.lock: sha256 of sources pinned 'unpinned', recorded by `invoke lock` ---------------


def sources_lock_path(config_path: Path) -> Path:
    return config_path.with_name(SOURCES_LOCK)


def read_sources_lock(config_path: Path) -> dict[str, str]:
    """Source URL → sha256."""
    path = sources_lock_path(config_path)
    if not path.exists():
        return {}
    try:
        recorded = json.loads(path.read_text())["sources"]
        if not isinstance(recorded, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f'{path}: expected JSON {{"sources": {{url: sha256}}}}',
            hint=f"delete {path.name} and run `invoke lock` again",
        ) from None
    return {str(k): str(v) for k, v in recorded.items()}


def write_sources_lock(config_path: Path, recorded: Mapping[str, str]) -> Path:
    """Add ``recorded`` to the lock (entries already there stay)."""
    path = sources_lock_path(config_path)
    merged = {**read_sources_lock(config_path), **recorded}
    write_text(path, json.dumps({"sources": dict(sorted(merged.items()))}, indent=2) + "\n")
    return path


# -- build/images.lock.json: what `invoke push` pushed ------------------------------------------


def read_images_lock(root: Path) -> dict[str, str]:
    """Image ref → manifest digest of what was pushed from this checkout."""
    file = root / IMAGES_LOCK
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{file}: unreadable lock file ({exc}); delete it and push again"
        ) from None
    if not isinstance(data, dict) or not all(
        isinstance(v, str) and v.startswith("sha256:") for v in data.values()
    ):
        raise ConfigError(f"{file}: expected a mapping of image ref to sha256:… digests")
    return data


def write_images_lock(root: Path, digests: Mapping[str, str]) -> Path:
    file = root / IMAGES_LOCK
    data = {**read_images_lock(root), **digests}
    write_text(file, json.dumps(dict(sorted(data.items())), indent=2) + "\n")
    return file


# -- build/tested.json: images that passed the image tier, by image ID ---------------------------


def read_tested(root: Path) -> dict[str, dict[str, str]]:
    """Image ID → {ref, tested (UTC time), suite}; an unreadable record counts as empty. Keyed by
    image ID, so any rebuild makes an image untested."""
    try:
        data = json.loads((root / TESTED).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_tested(root: Path, images: Iterable[tuple[str, str]], suite: str) -> None:
    """Add ``(image id, ref)`` pairs as having passed ``suite``. Under a lock beside the record:
    the image tier's cells end in processes of their own, and may end together."""
    (root / TESTED).parent.mkdir(parents=True, exist_ok=True)
    with open(root / TESTED.with_name(".tested.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # let go when the file closes
        data = read_tested(root)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        for image_id, ref in images:
            data[image_id] = {"ref": ref, "tested": now, "suite": suite}
        write_text(root / TESTED, json.dumps(data, indent=2, sort_keys=True) + "\n")


def passed_tests(root: Path, image_id: str) -> bool:
    return image_id in read_tested(root)


# -- .cache/state/build-<key>.json: the no-op fast path's stamp, one per selection ---------------


def stamp_path(config_path: Path, selection: list[str]) -> Path:
    key = hashlib.sha256(json.dumps([str(config_path.resolve()), *selection]).encode()).hexdigest()
    return config_path.parent / ".cache" / "state" / f"build-{key[:16]}.json"


def read_stamp(config_path: Path, selection: list[str]) -> dict[str, Any] | None:
    try:
        data = json.loads(stamp_path(config_path, selection).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_stamp(config_path: Path, selection: list[str], data: dict[str, Any]) -> None:
    write_text(stamp_path(config_path, selection), json.dumps(data))


# -- $SLURMFORGE_STATE_DIR/<cluster>/: a deployed cluster's secrets and scale ---------------------


def cluster_dir(cluster_name: str) -> Path:
    """Where a cluster's secrets and scale live: outside the repository, never in an image
    ($SLURMFORGE_STATE_DIR, else $XDG_STATE_HOME/slurmforge, else ~/.local/state/slurmforge)."""
    given = os.environ.get("SLURMFORGE_STATE_DIR")
    base = Path(given or os.environ.get("XDG_STATE_HOME") or "~/.local/state").expanduser()
    where = "$SLURMFORGE_STATE_DIR" if given else "the state directory"
    if not base.is_absolute():
        raise ConfigError(f"{where} {quote(str(base))}: expected an absolute path")
    from slurmforge import options  # not on the no-op build's path (fastpath.py)

    options.directory(f"{where} {quote(str(base))}", base)
    return (base if given else base / "slurmforge") / cluster_name


def munge_key_path(cluster_name: str) -> Path:
    return cluster_dir(cluster_name) / "munge.key"


def read_scale(cluster_name: str) -> dict[str, int]:
    """Node set → the node count `invoke scale` set (it overrides the cluster file's)."""
    file = cluster_dir(cluster_name) / SCALE_FILE
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{file}: unreadable scale state ({exc}); delete it") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping of node set to node count; delete it")
    return {str(k): v for k, v in data.items()}


def write_scale(cluster_name: str, replicas: Mapping[str, int]) -> None:
    file = cluster_dir(cluster_name) / SCALE_FILE
    write_text(file, json.dumps(dict(replicas), indent=2, sort_keys=True) + "\n")


def forget_cluster(cluster_name: str, secrets: Iterable[str] = ()) -> None:
    """Delete the cluster's state files, its scale and its ``secrets`` (file names), and the
    directory once empty: only those this tool writes, never whatever else
    $SLURMFORGE_STATE_DIR points at."""
    directory = cluster_dir(cluster_name)
    for name in (SCALE_FILE, *secrets):
        (directory / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not there, or it holds something not ours
        directory.rmdir()


def ensure_secret(cluster_name: str, name: str, content: Callable[[], bytes]) -> tuple[Path, bool]:
    """The cluster's secret file ``name`` (deploy/roles/ declares them), made once from
    ``content()``: mode 0400 in a 0700 directory, written beside its place and renamed, so never
    partial. Returns its path and whether it was made now."""
    path = cluster_dir(cluster_name) / name
    if path.exists():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as fh:
        fh.write(content())
    os.replace(tmp, path)
    return path, True
