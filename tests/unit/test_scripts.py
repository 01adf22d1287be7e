"""Every shell script that ships in an image, the jail or rootfs/ (and our own scripts/, .ci/),
and every one deploy writes beside slurm.conf, passes shellcheck."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from slurmforge.deploy import loader
from slurmforge.deploy.slurm import conf
from slurmforge.versions import load as load_versions
from tests.common import ROOT
from tests.unit.helpers import shipped_with

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


def _generated_scripts(write_cluster, directory: Path) -> list[Path]:
    """The scripts deploy writes beside slurm.conf (a backup controller's primary-on, an elastic
    set's power programs, the site's prolog and epilog), written to ``directory``."""
    elastic = {"name": "burst", "definitions": ["cpu-small"], "elastic": {"max": 2}}
    data = shipped_with(controller={"replicas": 2})
    data["nodesets"].append(elastic)
    data["partitions"].append({"name": "burst", "nodesets": ["burst"]})
    cluster = loader.load(write_cluster(data), load_versions(ROOT / "versions.yaml"))
    files = conf.render(cluster)
    directory.mkdir()
    out = []
    for name, text in files.items():
        if conf.SCRIPT.match(name):
            out.append(directory / name)
            out[-1].write_text(text)
    assert {"primary-on", "power-resume", "power-suspend"} <= {p.name for p in out}
    return out


def test_shellcheck_is_clean(write_cluster, tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or "shellcheck"
    generated = _generated_scripts(write_cluster, tmp_path / "generated")
    proc = subprocess.run(
        [shellcheck, "--severity=style", *map(str, [*_shell_scripts(), *generated])],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
