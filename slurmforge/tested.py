"""Which images passed the image tests: a record keyed by image ID, so any rebuild invalidates it.

The image tier (tests/image) records the images it tested when every one of its tests ran and
passed (see its conftest); `invoke push` refuses images that are not in the record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from slurmforge import atomic

FILE = Path("build") / "tested.json"


def path(root: Path) -> Path:
    return root / FILE


def read(root: Path) -> dict[str, dict[str, str]]:
    """Image ID → {ref, tested (UTC time), suite}; an unreadable record counts as empty."""
    try:
        data = json.loads(path(root).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(root: Path, images: Iterable[tuple[str, str]], suite: str) -> None:
    """Add ``(image id, ref)`` pairs as having passed ``suite`` (atomic replace)."""
    data = read(root)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for image_id, ref in images:
        data[image_id] = {"ref": ref, "tested": now, "suite": suite}
    atomic.write_text(path(root), json.dumps(data, indent=2, sort_keys=True) + "\n")


def passed(root: Path, image_id: str) -> bool:
    return image_id in read(root)
