"""The subprocess seam: a command whose output's reader went away ends as Python's own writes do
there (BrokenPipeError, which the launcher ends quietly), not as a failed command."""

from __future__ import annotations

import os
import subprocess

import pytest

from slurmforge import proc


def test_a_pipe_whose_reader_is_closed_is_told_from_one_still_read() -> None:
    read, write = os.pipe()
    try:
        assert not proc.reader_gone(write)
        os.close(read)
        assert proc.reader_gone(write)
    finally:
        os.close(write)


def test_a_command_that_fails_writing_to_a_gone_reader_is_a_broken_pipe() -> None:
    read, write = os.pipe()
    os.close(read)
    kept = os.dup(1)
    os.dup2(write, 1)  # the stdout the command inherits: a pipe nobody reads
    try:
        with pytest.raises(BrokenPipeError):
            proc.run(["sh", "-c", "trap '' PIPE; echo listed"])
    finally:
        os.dup2(kept, 1)
        os.close(kept)
        os.close(write)
    # a failure with a reader still there is the command's
    with pytest.raises(subprocess.CalledProcessError):
        proc.run(["sh", "-c", "exit 3"])
