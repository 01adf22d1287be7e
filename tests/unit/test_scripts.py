"""Every shell script that ships in an image, the jail or rootfs/ (and our own scripts/, .ci/)
passes shellcheck."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

TREES = ("images", "jail", "rootfs", "scripts", ".ci")


def _shell_scripts() -> list[Path]:
    found = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if not path.is_file() or path.suffix in (".j2", ".c", ".yaml", ".conf"):
                continue
            head = path.read_bytes()[:200].decode(errors="replace")
            if head.startswith(("#!/bin/bash", "#!/bin/sh", "#!/usr/bin/env bash")) or (
                "shellcheck shell=" in head
            ):
                found.append(path)
    return found


def test_there_are_scripts_to_check() -> None:
    names = {p.name for p in _shell_scripts()}
    assert {"populate", "createuser", "hello.sh", "entrypoint.sh", "jail-mounts.sh"} <= names


def test_shellcheck_is_clean() -> None:
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or "shellcheck"
    proc = subprocess.run(
        [shellcheck, "--severity=style", *map(str, _shell_scripts())],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
