"""The lanes beside the main process (tests/lanes.py): a follower starts when its lane ends, not
before, and a lane stopped before it started never starts."""

from __future__ import annotations

import sys
import time
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


def test_a_follower_starts_when_its_lane_ends(tmp_path: Path) -> None:
    lead, follower = Quick("lead", 0.2, tmp_path), Quick("follower", 0, tmp_path)
    lead.then = follower
    assert lanes._follower(follower, [lead, follower])
    assert not lanes._follower(lead, [lead, follower])
    lead.start()
    assert follower.proc is None  # still running: the lead's
    assert lead.wait() == 0
    deadline = time.monotonic() + 10
    while follower.proc is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert follower.proc is not None
    assert follower.wait() == 0


def test_a_follower_stopped_first_never_starts(tmp_path: Path) -> None:
    lead, follower = Quick("lead", 0.2, tmp_path), Quick("follower", 0, tmp_path)
    lead.then = follower
    lead.start()
    follower.stop()  # an interrupted run stops every lane
    assert lead.wait() == 0
    time.sleep(0.2)  # the lead's thread starts a follower within milliseconds of its end
    follower.start()
    assert follower.proc is None
