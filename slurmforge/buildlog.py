"""A build's log directory: ``.cache/logs/<UTC stamp>/`` beside versions.yaml, one log file per
target and the run's summary.json, with ``.cache/logs/latest`` pointing at the newest. Standard
library only: the no-op fast path writes its summary here too."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def root(project: Path) -> Path:
    """Where the log directories of the project at ``project`` (versions.yaml's directory) are."""
    return project / ".cache" / "logs"


def new_log_dir(log_root: Path) -> Path:
    """A fresh ``<log_root>/<UTC stamp>`` directory, also reachable as ``<log_root>/latest``."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    log_dir = log_root / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    # replaced in one rename: builds that take no turn (buildcmd.py) may make theirs at once
    link = log_root / f".latest.{stamp}"
    link.symlink_to(stamp)
    os.replace(link, log_root / "latest")
    return log_dir


def write_summary(log_dir: Path, rows: list[dict[str, Any]]) -> None:
    (log_dir / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
