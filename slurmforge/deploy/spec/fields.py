"""The value types of a cluster file that more than one of its schemas uses: names, paths, the
directories a jail keeps for the nodes, account names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

from slurmforge.errors import quote

# node and service names: DNS labels short enough for Slurm node names with a "-<index>" suffix
DNSName = Annotated[
    str, StringConstraints(strict=True, pattern=r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
]
Word = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.:/=-]+$")]
Capability = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Z][A-Z_]+$")]
AbsPath = Annotated[str, StringConstraints(strict=True, pattern=r"^/[^\s:]*$")]
EnvName = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
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


AccountName = Annotated[str, StringConstraints(strict=True), AfterValidator(account)]
