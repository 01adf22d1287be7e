"""Where GPU user space comes from, as versions.yaml pins it: NVIDIA's wheels (one checksum per
arch), Debian packages, a vendor's apt repository, or a pip lock file (config.py's Cuda and
tools hold these)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    Strict,
    StringConstraints,
    model_validator,
)

from slurmforge.inputs import Model, inside
from slurmforge.pins import NATIVE_ARCH, UNPINNED, Arch, Sha256, Source, Url

_REQUIREMENT = r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!-]*$"


class WheelPin(Model):
    """A binary wheel fetched on the host with pip (by name, from the index pip is set up for),
    pinned per arch: ``sha256`` is the amd64 wheel's, or ``{amd64: …, arm64: …}`` (NVIDIA
    publishes a wheel per platform, so each arch's file has its own checksum)."""

    requirement: Annotated[str, Strict(), StringConstraints(pattern=_REQUIREMENT)]
    """NAME==VERSION."""
    sha256: Annotated[
        dict[Arch, Sha256],
        BeforeValidator(
            lambda v: {NATIVE_ARCH: v} if isinstance(v, str) else v,
            json_schema_input_type=Sha256 | dict[Arch, Sha256],
        ),
        Field(min_length=1),
    ]
    """The wheel's sha256 (amd64), or one per arch: {amd64: ..., arm64: ...}."""

    def for_arch(self, arch: str) -> Wheel | None:
        """The wheel for ``arch``, or None when none is pinned for it."""
        sha = self.sha256.get(arch)  # type: ignore[call-overload]
        return None if sha is None else Wheel(self.requirement, sha, arch)


@dataclass(frozen=True)
class Wheel:
    """One arch's file of a pinned wheel: what is fetched, cached and put in a build context."""

    requirement: str
    sha256: str
    arch: str = NATIVE_ARCH

    @property
    def pinned(self) -> bool:
        return self.sha256 != UNPINNED

    @property
    def url(self) -> str:  # the key under which fetches and locks record it
        tail = "" if self.arch == NATIVE_ARCH else f"?arch={self.arch}"
        return f"pip:{self.requirement}{tail}"

    @property
    def key(self) -> str:
        return self.url

    @property
    def filename(self) -> str:
        name, version = self.requirement.split("==")
        tail = "" if self.arch == NATIVE_ARCH else f"-{self.arch}"
        return f"{re.sub(r'[-.]+', '_', name).lower()}-{version}{tail}.whl"


AptPin = Annotated[str, Strict(), StringConstraints(pattern=r"^[a-z0-9][a-z0-9.+-]*=\S+$")]


class AptRepo(Model):
    """Packages from a vendor apt repository (production sites that reach it)."""

    repository: Url
    """Base URL of the flat repository ('deb [signed-by=…] URL /')"""
    keyring: Source
    """Its signing key, fetched on the host and verified like any source"""
    packages: tuple[AptPin, ...] = Field(min_length=1)
    """Packages pinned as NAME=VERSION."""


def _deb(source: Source) -> Source:
    if not source.filename.endswith(".deb"):
        raise ValueError(f"expected the URL of a .deb file, got {source.url!r}")
    return source


class Userspace(Model):
    """Where a set of GPU libraries or tools comes from: NVIDIA's wheels and/or Debian packages
    (both fetched on the host, verified by sha256 and unpacked into one CUDA prefix, never
    installed with dpkg), a vendor apt repository on its own, or a pip lock file on its own
    (installed into a virtual environment by the component's template)."""

    wheels: tuple[WheelPin, ...] = ()
    """NVIDIA's wheels."""
    debs: tuple[Annotated[Source, AfterValidator(_deb)], ...] = ()
    """Debian packages (URL and sha256)."""
    apt: AptRepo | None = None
    """A vendor apt repository, on its own."""
    lock: Annotated[str, Strict(), AfterValidator(inside("versions.yaml's directory"))] | None = (
        None
    )
    """A pip lock file, relative to versions.yaml: every line pinned with its hashes"""

    @model_validator(mode="after")
    def _one_kind(self) -> Userspace:
        kinds = [bool(self.wheels or self.debs), self.apt is not None, self.lock is not None]
        if sum(kinds) != 1:
            raise ValueError("expected 'wheels' and/or 'debs', or 'apt' or 'lock' on its own")
        return self

    @property
    def kind(self) -> str:
        return "apt" if self.apt is not None else "lock" if self.lock is not None else "files"
