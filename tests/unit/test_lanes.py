"""The lanes beside the main process (tests/lanes.py): the image tier's cells follow, one in each
place a process frees, and never start before one is free or after the run was stopped."""

from __future__ import annotations

import sys
from pathlib import Path

from tests import lanes


class Quick(lanes.Lane):
    """A lane whose process sleeps instead of running tests."""

    def __init__(self, name: str, seconds: float, directory: Path) -> None:
        super().__init__(name, [])
        self.seconds = seconds
        self.log = directory / f"{name}.log"

    def argv(self) -> list[str]:
        return [sys.executable, "-c", f"import time; time.sleep({self.seconds})"]


def test_each_follower_takes_the_next_place_freed(tmp_path: Path) -> None:
    lead = Quick("k8s", 1, tmp_path)
    first, second, third = (Quick(f"image-{n}", 1, tmp_path) for n in (1, 2, 3))
    run = lanes.Run([lead], lanes.Followers([first, second, third]))
    run.begin()
    assert lead.proc is not None and first.proc is None  # no place is free yet
    run.followers.free()  # the main process' tests are done
    assert first.proc is not None and second.proc is None
    assert lead.wait() == 0
    assert second.started.wait(10)  # in the lead's place
    assert first.wait() == 0
    assert third.started.wait(10)  # in the first's
    assert [lane.wait() for lane in (second, third)] == [0, 0]


def test_without_a_lead_lane_the_followers_start_with_the_lanes(tmp_path: Path) -> None:
    waiting, first = Quick("waiting", 0, tmp_path), Quick("image-1", 0, tmp_path)
    run = lanes.Run([waiting], lanes.Followers([first]))
    run.begin()
    run.begin()  # every test's setup calls it
    assert first.proc is not None
    assert [lane.wait() for lane in run.all()] == [0, 0]


def test_followers_of_a_stopped_run_never_start(tmp_path: Path) -> None:
    lead, first = Quick("k8s", 0.2, tmp_path), Quick("image-1", 0, tmp_path)
    run = lanes.Run([lead], lanes.Followers([first]))
    run.begin()
    run.stop()  # an interrupted run stops every lane
    assert lead.proc is not None and lead.proc.poll() is not None
    run.followers.free()
    assert first.proc is None and not first.started.is_set()
