"""The value types of a cluster file that more than one of its schemas uses: names, paths, the
directories a jail keeps for the nodes, account names, Kubernetes label keys."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import worded

# node and service names: DNS labels short enough for Slurm node names with a "-<index>" suffix
DNS_NAME = worded(
    r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$",
    "a name of lower-case letters, digits and '-' (a letter first, not '-' last, at most 32)",
)
DNSName = Annotated[str, StringConstraints(strict=True, pattern=DNS_NAME)]
WORD = worded(r"^[A-Za-z0-9_.:/=-]+$", "one word of letters, digits and _ . : / = -")
Word = Annotated[str, StringConstraints(strict=True, pattern=WORD)]
CAPABILITY = worded(r"^[A-Z][A-Z_]+$", "a Linux capability's name without CAP_ (SYS_ADMIN)")
Capability = Annotated[str, StringConstraints(strict=True, pattern=CAPABILITY)]
ABS_PATH = worded(r"^/[^\s:]*$", "an absolute path (starting with /, no spaces or ':')")
AbsPath = Annotated[str, StringConstraints(strict=True, pattern=ABS_PATH)]
ENV_NAME = worded(r"^[A-Za-z_][A-Za-z0-9_]*$", "an environment variable's name")
EnvName = Annotated[str, StringConstraints(strict=True, pattern=ENV_NAME)]
# Slurm lower-cases account names and takes these characters in them
ACCOUNT = r"^[a-z0-9_][a-z0-9_.-]{0,63}$"

# Top-level directories whose files the compute nodes keep for themselves: a job's output file
# (written by slurmstepd, outside the jail) could not land in the jail there (jail/spank).
NODE_DIRS = ("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32")
NODE_DIRS += ("proc", "run", "sbin", "sys", "usr", "var")


def account(value: str) -> str:
    if not re.fullmatch(ACCOUNT, value):
        raise ValueError(
            "expected a Slurm account name (lower-case a-z, 0-9, _ . -, at most 64, not "
            f"starting with . or -), got {quote(value)}"
        )
    return value


def is_file(path: str) -> bool:
    try:
        return Path(path).is_file()
    except (OSError, ValueError):  # too long, a NUL byte in it, …: not a file this can read
        return False


def check_private(where: str, file: str) -> None:
    """A secret file the cluster file names (``where``: the file and key) is its owner's
    alone, as ssh wants a private key: refused when its group or anyone else may read, write or
    run it."""
    try:
        mode = Path(file).stat().st_mode
    except OSError:
        return  # whoever reads it says why it cannot be read
    if mode & 0o077:
        raise ConfigError(
            f"{where}: {file} is open to others (mode {mode & 0o777:04o}); a file holding a "
            "secret must be readable by its owner alone",
            hint=f"chmod 600 {file}",
        )


AccountName = Annotated[str, StringConstraints(strict=True), AfterValidator(account)]


# Kubernetes' qualified name (apimachinery's validation): [prefix/]name
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_PREFIX = rf"{_LABEL}(\.{_LABEL})*"


def _qualified(value: str) -> bool:
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not re.fullmatch(_PREFIX, prefix)):
        return False
    return bool(re.fullmatch(_NAME, name)) and len(name) <= 63


def _key_value(value: str) -> str:
    """``key`` or ``key=value``: a label's or a taint's."""
    key, eq, val = value.partition("=")
    if not _qualified(key) or (eq and val and not re.fullmatch(_NAME, val)):
        example = "'cloud.google.com/impending-node-termination', 'pool=spot'"
        raise ValueError(
            f"expected a Kubernetes label or taint key, optionally =value (e.g. {example}), "
            f"got {quote(value)}"
        )
    return value


def _condition(value: str) -> str:
    if not _qualified(value):
        raise ValueError(
            f"expected a Node condition type (e.g. 'KernelDeadlock'), got {quote(value)}"
        )
    return value


def _label_key(value: str) -> str:
    if not _qualified(value):
        raise ValueError(
            "expected a Kubernetes label key (e.g. 'topology.kubernetes.io/zone'), "
            f"got {quote(value)}"
        )
    return value


KeyValue = Annotated[str, StringConstraints(strict=True), AfterValidator(_key_value)]
LabelKey = Annotated[str, StringConstraints(strict=True), AfterValidator(_label_key)]
Condition = Annotated[str, StringConstraints(strict=True), AfterValidator(_condition)]
