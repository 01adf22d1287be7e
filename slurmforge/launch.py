"""The `invoke` command of slurmforge's environment. `invoke build` (of the default set, or of
the one `--set` names) with nothing to build is answered here from the last build's stamp
(fastpath.py), printed as the task prints it, without importing invoke: invoke's own import
takes longer than the whole answer. Any other command line, and a build with anything to do,
is invoke's, unchanged.

pyproject.toml installs this as the environment's `invoke` script in place of invoke's own
(`python -m invoke` is always invoke's).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _checkout() -> Path | None:
    """The directory invoke would take tasks.py from (the nearest with one, from the current
    one up), when it is a slurmforge checkout."""
    here = Path.cwd()
    for directory in (here, *here.parents):
        if (directory / "tasks.py").is_file():
            return directory if (directory / "versions.yaml").is_file() else None
    return None


def _set_name(args: list[str]) -> str | None:
    """The set of `build` or `build --set NAME` (`-s NAME`, `--set=NAME`); None for any other
    command line."""
    match args:
        case ["build"]:
            return "default"
        case ["build", "--set" | "-s", name]:
            return name
        case ["build", option] if option.startswith("--set="):
            return option.removeprefix("--set=")
    return None


def answered(args: list[str]) -> bool:
    """Whether ``args`` is a no-op build, answered (its summary printed)."""
    name = _set_name(args)
    root = _checkout() if name else None
    if root is None or os.environ.get("INVOKE_RUNTIME_CONFIG"):  # invoke's config: its path
        return False
    from slurmforge import fastpath, summary

    rows = fastpath.check(root / "versions.yaml", name, (), ())
    if rows is None:
        return False
    summary.print_summary(rows)
    return True


def main() -> None:
    try:
        try:
            if answered(sys.argv[1:]):
                return
            from invoke.main import program

            program.run()
        finally:  # buffered output (stdout not a terminal) is written here, not at exit
            sys.stdout.flush()
    except BrokenPipeError:
        # whatever read the output went away (`invoke --list | head`): end quietly, as a shell
        # tool does, with stdout pointed where Python's own flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
