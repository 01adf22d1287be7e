"""One exception hierarchy; tasks.py turns these into a one-line message and an exit code."""

from __future__ import annotations

import reprlib

QUOTE_LIMIT = 80


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters: a message names the
    value, it does not reproduce a pasted file (or an alias bomb's expansion)."""
    text = _repr(value, limit * 2)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _repr(value: object, budget: int) -> str:
    """repr that stops early on large containers and strings (reprlib with a size budget)."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = budget
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 8
    r.maxlevel = 4
    return r.repr(value)


class SlurmforgeError(Exception):
    """Base error. ``exit_code`` 2 means bad input, 1 means an operation failed."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(SlurmforgeError):
    """versions.yaml or a command-line selection is invalid."""

    exit_code = 2


class SourceError(SlurmforgeError):
    """An upstream artifact could not be fetched."""


class ChecksumError(SourceError):
    """A fetched artifact does not match its pinned sha256: the input is wrong, not the network."""

    exit_code = 2


class PinError(SourceError):
    """The origin does not serve what a pin names (a tag that moved, a commit it lacks): the
    pin or the mirror is wrong, and retrying will not help."""

    exit_code = 2


class EngineUnavailable(SlurmforgeError):
    """No Docker daemon answers; the user has to start one before anything can be built."""

    exit_code = 2


class BuildError(SlurmforgeError):
    """One or more targets failed to build."""


class DeployError(SlurmforgeError):
    """A deployment step failed (a container did not come up, a node never became idle)."""
