"""What the build tier's tests share: `invoke build` on a copy of the project and what its
summary says, and a copy whose default set also builds arm64."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.common import dump_yaml


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


GRACE = "24.05.8-cuda12.9.1-debian12"  # the grace set's cell (CUDA with aarch64 wheels)


REGISTRY = "sitelayer.test/sf"


# tomli-w 1.0.0's wheel, as PyPI serves it
WHEEL_SHA256 = "9f2a07e8be30a0729e533ec968016807069991ae2fd921a78d42f429ae5f4463"


def site_layer_copy(root: Path, wheel_sha256: str) -> None:
    site = root / "site"
    (site / "files" / "etc").mkdir(parents=True, exist_ok=True)
    (site / "files" / "etc" / "site-release").write_text("ours\n")
    (site / "worker.txt").write_text(f"tomli-w==1.0.0 --hash=sha256:{wheel_sha256}\n")
    (site / "site.yaml").write_text(
        dump_yaml(
            {
                "components": {
                    "jail": {"debs": ["tree"], "files": "files"},
                    "worker": {"pip": "worker.txt"},
                }
            }
        )
    )
