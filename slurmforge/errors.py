"""One exception hierarchy; tasks.py turns these into a one-line message and an exit code."""

from __future__ import annotations


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
