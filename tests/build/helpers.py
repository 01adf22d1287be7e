"""What the build tier's tests share: `invoke build` on a copy of the project and what its
summary says, and a copy whose default set also builds arm64."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_build(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(root), "build", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "SLURMFORGE_DEBUG": ""},
    )


def build_summary(root: Path) -> dict[str, str]:
    rows = json.loads((root / ".cache/logs/latest/summary.json").read_text())
    return {r["target"].split("/")[0]: r["status"] for r in rows}


def build_notes(root: Path) -> set[str]:
    rows = json.loads((root / ".cache/logs/latest/summary.json").read_text())
    assert {r["status"] for r in rows} == {"cached"}, rows
    # what an image goes without (optional features skipped) is said on every path; set it aside
    return {r["note"].split("; without ")[0] for r in rows}


CELL = "24.05.8-cuda12.2.2-debian12"


def with_arm64(root: Path) -> None:
    """The default set with both arches (the set's cuda line is followed by its arch)."""
    path = root / "versions.yaml"
    text = path.read_text()
    anchor = '      cuda: ["12.2.2"]\n'
    assert anchor in text
    path.write_text(text.replace(anchor, anchor + "      arch: [amd64, arm64]\n", 1))
