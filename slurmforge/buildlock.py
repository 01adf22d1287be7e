"""One `invoke build` at a time per checkout. A second build that has work to do waits for the
first (saying whose turn it is), then looks again: what the first built is cached by then, so
the same Slurm is never compiled by two builds side by side. A build with nothing to do never
waits (the no-op fast path answers before the lock is taken), nor does one that would only tag
images that exist (a copy of the checkout, another set with the same cell: buildcmd.py).

The lock is flock(2) on .cache/build.lock: the kernel lets go of it when its holder exits,
however it exits, so a killed build leaves nothing to clean up.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held(root: Path) -> Iterator[None]:
    path = root / ".cache" / "build.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another build"
            print(f"build: waiting for {holder} to finish ({path})", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.truncate(0)
        lock.write(f"invoke build (pid {os.getpid()})\n")
        lock.flush()
        yield
