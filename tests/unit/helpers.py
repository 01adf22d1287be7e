"""What the unit tests share: the real CLI run in-process and its clean refusals, the shipped
cluster with changes, secret files, hadolint."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

from tests.common import ROOT, load_yaml
from tests.unit.inproc import run_cli

# a process that holds the build lock of the directory it is given, for two minutes
HOLD = """
import sys, time
from pathlib import Path
from slurmforge import buildlock
with buildlock.held(Path(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(120)
"""

INVOKE = [sys.executable, "-m", "invoke", "--search-root", str(ROOT)]


def run_invoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command line, run in this process (see inproc.py)."""
    return run_cli(*args, env=env)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("error: "), proc.stderr
    assert expected in first, proc.stderr
    assert all(line.startswith(("error: ", "hint: ")) for line in proc.stderr.splitlines())


SHIPPED = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())


def assert_dry_run_refused(path: Path, out: Path, expected: str) -> str:
    """`deploy --dry-run` of the cluster file ``path`` fails in one line naming ``expected``,
    writes nothing to ``out`` and leaves the file as it was; its error output."""
    before = path.read_bytes()
    proc = run_invoke("deploy", "--cluster", str(path), "--out", str(out), "--dry-run")
    assert_clean_failure(proc, expected)
    assert not out.exists()
    assert path.read_bytes() == before
    return proc.stderr


def shipped_with(**changes) -> dict:
    data = copy.deepcopy(SHIPPED)
    data.update(changes)
    return data


def secret_files(tmp_path: Path) -> dict[str, Path]:
    names = ("munge.key", "jwt_hs256.key", "db-password", "portal-cookie-secret")
    more = ("portal-proxy-token", "portal-tls.pem", "metrics-token")
    return {n: tmp_path / n for n in (*names, *more)}


HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
    "hadolint"
)
