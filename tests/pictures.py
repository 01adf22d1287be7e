"""The docs' pictures, taken as the tests see the product: the portal's start form and JupyterLab by
the portal test's own browser (tests/browser.py's ``picture``), and an `invoke build` summary by
capturing the terminal. ``python -m tests.pictures`` (what `invoke docs --pictures` runs) needs
Docker and the default cell's images (README's first command); it writes docs/pictures/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "pictures"
PORTAL_TEST = (
    "tests/cluster/test_portal.py::test_a_directory_user_runs_jupyterlab_as_their_job_in_the_jail"
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def build_summary() -> str:
    """`invoke build`'s closing table as the terminal shows it (a no-op build)."""
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "build"], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "SLURMFORGE_DEBUG": ""}, check=True, timeout=3600,
    )  # fmt: skip
    table = [line for line in ANSI.sub("", proc.stdout).splitlines() if line.strip()]
    return "$ invoke build\n" + "\n".join(table) + "\n"


def portal() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SLURMFORGE_PICTURES": tmp}
        argv = [sys.executable, "-m", "pytest", PORTAL_TEST, "-p", "no:cacheprovider", "-q"]
        subprocess.run(argv, cwd=ROOT, env=env, check=True, timeout=1800)
        for name in ("portal-form", "portal-jupyterlab"):
            (OUT / f"{name}.png").write_bytes((Path(tmp) / f"{name}.png").read_bytes())


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "build-summary.txt").write_text(build_summary())
    portal()
    for path in sorted(OUT.iterdir()):
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
