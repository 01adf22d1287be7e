"""Two builds of one checkout take turns: the second waits for the first, says for whom, and
goes on once the first has exited, however it exited."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurmforge import buildcmd, buildlock
from slurmforge.cli import Select
from slurmforge.errors import SlurmforgeError
from slurmforge.options import FetchOptions
from tests.common import ROOT
from tests.unit.helpers import HOLD


def test_a_second_build_waits_for_the_first_to_exit(tmp_path: Path, capsys) -> None:
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout.readline().strip() == "holding"
        entered = threading.Event()

        def second() -> None:
            with buildlock.held(tmp_path):
                entered.set()

        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.3)
        assert not entered.is_set()  # still the first's turn
        first.kill()  # a build killed mid-way lets go too
        waiter.join(10)
        assert entered.is_set()
    finally:
        first.kill()
        first.wait()
    err = capsys.readouterr().err
    assert f"waiting for invoke build (pid {first.pid})" in err, err


def test_a_build_alone_does_not_wait(tmp_path: Path, capsys) -> None:
    with buildlock.held(tmp_path):
        pass
    with buildlock.held(tmp_path):
        pass
    assert "waiting" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("components", "docker_host", "refusal"),
    [
        (("gpu",), None, "--component 'gpu': unknown component"),
        ((), "unix:///nonexistent", "Docker daemon is not reachable at unix:///nonexistent"),
    ],
)
def test_what_needs_no_build_is_refused_without_waiting_for_another_build(
    tmp_path: Path, monkeypatch, components, docker_host, refusal
) -> None:
    """CI's prebuild holds the lock for most of a run; a typo or a stopped daemon must not wait
    behind it."""
    if docker_host:
        monkeypatch.setenv("DOCKER_HOST", docker_host)
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout.readline().strip() == "holding"
        select = Select(ROOT / "versions.yaml", "default", (), components, tmp_path)
        refused: list[Exception] = []

        def build() -> None:
            with pytest.raises(SlurmforgeError, match=re.escape(refusal)) as why:
                buildcmd.build(select, FetchOptions(), jobs=1, fail_fast=False)
            refused.append(why.value)

        attempt = threading.Thread(target=build, daemon=True)
        attempt.start()
        attempt.join(20)
        assert refused, "the build waited for the lock before refusing"
    finally:
        first.kill()
        first.wait()
