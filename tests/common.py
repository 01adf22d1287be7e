"""What the tiers share besides fixtures: the checkout, the selection under test, the sources'
mirror, a build of the selection, and waiting for a state (conftest.py keeps the fixtures)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge.app import Project, Selection

ROOT = Path(__file__).resolve().parents[1]

# PyYAML's libyaml loader and dumper where it has them, as slurmforge reads and writes its own
# files: the unit tier alone writes and reads a few thousand cluster and versions files (the
# shipped versions.yaml: 17 ms to dump and 36 to load in Python, 3.5 and 3.2 with libyaml)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load``, with libyaml."""
    return yaml.load(text, Loader=_LOADER)


def dump_yaml(data: Any, **options: Any) -> str:
    """``yaml.safe_dump``, with libyaml (the same options)."""
    return yaml.dump(data, Dumper=_DUMPER, **options)


# -- Docker tiers (image, cluster): the images of the `default` set, built through `invoke build`.
# The first run compiles Slurm (several minutes); later runs find every target cached.


# The selection under test: the `default` set unless `invoke test-images`/`test-cluster` name
# another (the image tier runs on every cell of the `ci` set unless told otherwise).
TEST_SET = os.environ.get("SLURMFORGE_TEST_SET") or "default"
TEST_CELLS = tuple(c for c in os.environ.get("SLURMFORGE_TEST_CELLS", "").split(",") if c)
TEST_CONFIG = Path(os.environ.get("SLURMFORGE_TEST_CONFIG") or ROOT / "versions.yaml")

# The GitHub-only sources (Slurm 23.11/24.05, pyxis, enroot, nccl-tests) come from a mirror laid
# out as <host>/<path> where GitHub is out of reach: $SLURMFORGE_MIRROR, else the machine's shared
# copy next to the checkout. The Docker tiers build with it; subprocesses inherit it.
SHARED_MIRROR = ROOT.parent / "shared" / "mirror"
if not os.environ.get("SLURMFORGE_MIRROR") and SHARED_MIRROR.is_dir():
    os.environ["SLURMFORGE_MIRROR"] = str(SHARED_MIRROR)


def _github_reachable() -> bool:
    probe = ["git", "ls-remote", "--exit-code", "https://github.com/NVIDIA/pyxis.git", "HEAD"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=15).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def need_sources() -> None:
    """Skip, naming the mirror, when neither a mirror nor GitHub can supply the sources."""
    if not os.environ.get("SLURMFORGE_MIRROR") and not _github_reachable():
        pytest.skip(
            f"needs the upstream git sources: no mirror at {SHARED_MIRROR}, "
            "$SLURMFORGE_MIRROR is unset and github.com is unreachable"
        )


def slurm_files(tag: str, paths: tuple[str, ...], dest: Path) -> Path:
    """``paths`` of Slurm's tag ``tag``, from the mirror's git, unpacked under ``dest`` (made)."""
    need_sources()
    mirror = Path(os.environ["SLURMFORGE_MIRROR"]) / "github.com" / "SchedMD" / "slurm.git"
    archive = subprocess.run(
        ["git", "-C", str(mirror), "archive", tag, *paths], capture_output=True, check=True
    )
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def select(set_name: str, cells: tuple[str, ...]) -> Project:
    return Project(Selection(TEST_CONFIG, set_name, cells))


def build(project: Project) -> dict[str, str]:
    """component → image reference, after `invoke build` of the project's selection succeeded."""
    need_sources()
    sel = project.selection
    argv = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build"]
    argv += ["--set", sel.set_name, "--config", str(sel.config_path)]
    argv += [w for c in sel.cells for w in ("--cell", c)]
    proc = subprocess.run(argv, cwd=ROOT, env={**os.environ, "SLURMFORGE_DEBUG": ""}, timeout=3600)
    assert proc.returncode == 0, f"{' '.join(argv[3:])} failed (see .cache/logs/latest)"
    return {t.component: t.ref for t in project.targets}


def until(what: str, check, timeout: float = 120, detail=None):
    """``check()``'s first truthy answer, asked every 2 s; fails the test after ``timeout``,
    saying what ``detail()`` then shows and how long the slowest check took when one stalled
    (a command that hangs reads differently from a state that never came)."""
    deadline = time.monotonic() + timeout
    slowest = 0.0
    while True:
        began = time.monotonic()
        if got := check():
            return got
        slowest = max(slowest, time.monotonic() - began)
        if time.monotonic() >= deadline:
            stalled = f" (one check took {slowest:.0f} s)" if slowest > 10 else ""
            shown = f"; now: {detail()}" if detail else ""
            raise AssertionError(f"{what}: not after {timeout:.0f} s{stalled}{shown}")
        time.sleep(2)
