"""The unit tier alone in one process per core (pytest-xdist): a run that selects only tests under
tests/unit (`pytest tests/unit`) gets `-n` set to the machine's cores, unless it says otherwise
(`-n 0` runs it in one process). Every other run is left as it is: the tiers past the unit tier
share clusters and images through session fixtures, which one process per worker would make
again each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent / "unit"


def _only_unit(config: pytest.Config) -> bool:
    paths = [Path(arg.split("::")[0]) for arg in config.args if not arg.startswith("-")]
    resolved = [(config.invocation_params.dir / p).resolve() for p in paths]
    return bool(resolved) and all(p == UNIT or UNIT in p.parents for p in resolved)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    if not config.pluginmanager.hasplugin("xdist") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if config.getoption("numprocesses", None) is None and _only_unit(config):
        # what xdist's own pytest_cmdline_main makes of -n, which may already have run
        workers = os.cpu_count() or 1
        config.option.numprocesses = workers
        config.option.dist = "load"
        config.option.tx = ["popen"] * workers
