"""The real `invoke` command line (its Program, tasks.py, the package), run in this process.

What `python -m invoke` does, without the half second of interpreter start and imports per run,
so that many inputs fit in the unit budget. An exception that escapes is returned as the
traceback the user would have seen, exit status 1.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import traceback
from collections.abc import Iterator

from invoke import Program

from tests.common import ROOT

NO_DAEMON = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@contextlib.contextmanager
def _environ(changes: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(changes)
    os.environ.pop("SLURMFORGE_DEBUG", None)  # it would let errors through as tracebacks
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    program = Program(name="Invoke", binary="inv[oke]")
    with (
        _environ({**NO_DAEMON, **(env or {})}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            program.run(["invoke", "--search-root", str(ROOT), *args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:
            err.write(traceback.format_exc())
            code = 1
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())
