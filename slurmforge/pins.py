"""The value types versions.yaml's schema (config.py) is made of: checksums, commits, URLs, image
references and tag templates, the CPU arches, and the two ways an upstream artifact is pinned (an
archive by its sha256, a git repository by its commit)."""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    Discriminator,
    Strict,
    StringConstraints,
    Tag,
    model_validator,
)

from slurmforge import refs
from slurmforge.errors import quote
from slurmforge.inputs import Model

UNPINNED = "unpinned"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VERSION3 = r"^\d+\.\d+\.\d+$"
_COMMIT = r"^[0-9a-f]{40}$"
_NAME = r"^[a-z0-9][a-z0-9._-]*$"
_DEB_NAME = r"^[a-z0-9][a-z0-9+.-]+$"  # a Debian package name (Debian policy 5.6.1)
TAG_FIELDS = frozenset({"slurm", "slurm_series", "cuda", "distro", "component", "arch"})


def _version3(value: str) -> str:
    if not re.fullmatch(_VERSION3, value):
        raise ValueError(f"expected a version like '24.11.5', got {quote(value)}")
    return value


def _commit(value: str) -> str:
    if not re.fullmatch(_COMMIT, value):
        raise ValueError(f"expected a full commit ID (40 lowercase hex digits), got {quote(value)}")
    return value


def _sha256(value: str) -> str:
    if value != UNPINNED and not _SHA256.match(value):
        raise ValueError(f"expected 64 lowercase hex digits or '{UNPINNED}', got {quote(value)}")
    return value


def _url(value: str) -> str:
    return refs.url(value, ("http", "https", "file"))


_GIT_SCHEMES = ("https", "git", "file")


def _git_url(value: str) -> str:
    return refs.url(value, _GIT_SCHEMES)


def _image_ref(value: str) -> str:
    return refs.image_ref(value)


def _tag_template(value: str) -> str:
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
    except ValueError as exc:
        raise ValueError(f"malformed tag template {quote(value)}: {exc}") from None
    unknown = fields - TAG_FIELDS
    if unknown:
        raise ValueError(
            f"unknown placeholder {{{sorted(unknown)[0]}}} in {quote(value)}; "
            f"expected some of {{{'}, {'.join(sorted(TAG_FIELDS))}}}"
        )
    return value


# Scalars are strict (a YAML 12.2 must not silently become the string "12.2"); lists may be lists.
Str = Annotated[str, Strict()]
Int = Annotated[int, Strict()]
Sha256 = Annotated[str, Strict(), AfterValidator(_sha256)]
Url = Annotated[str, Strict(), AfterValidator(_url)]
Version3 = Annotated[str, Strict(), AfterValidator(_version3)]
Name = Annotated[str, Strict(), StringConstraints(pattern=_NAME)]
GitUrl = Annotated[str, Strict(), AfterValidator(_git_url)]
Commit = Annotated[str, Strict(), AfterValidator(_commit)]
GitTag = Annotated[str, Strict(), StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")]


class Source(Model):
    url: Url
    """Where the file is downloaded from."""
    sha256: Sha256
    """Its sha256 (or `unpinned`, recorded by `invoke lock`)."""

    @property
    def pinned(self) -> bool:
        return self.sha256 != UNPINNED

    @property
    def key(self) -> str:  # what tells this artifact from every other in one run
        return self.url

    @property
    def filename(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


class GitSource(Model):
    """An upstream git repository pinned by commit: the tag is for people, the commit is trusted.

    Fetched with git (shallow, by commit, submodules by their gitlinks) and turned into a
    deterministic tar keyed by the commit, so the commit plays the part a sha256 plays for a file.
    """

    git: GitUrl
    """The repository's clone URL."""
    tag: GitTag
    """The tag, for people."""
    commit: Commit
    """The commit the tag must name (40 hex digits): what is trusted."""

    @model_validator(mode="before")
    @classmethod
    def _no_checksum(cls, data: Any) -> Any:
        if isinstance(data, dict) and "sha256" in data:
            raise ValueError("a git source is pinned by 'commit'; remove 'sha256'")
        return data

    pinned: ClassVar[bool] = True

    @property
    def url(self) -> str:
        return self.git

    @property
    def key(self) -> str:  # one repository serves several releases
        return f"{self.git}@{self.commit}"

    @property
    def repo(self) -> str:
        return self.git.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")

    @property
    def filename(self) -> str:
        return f"{self.repo}-{self.tag}.tar"


# Union branch names; pydantic puts them in error locations, format_path leaves them out.
ARCHIVE_KIND, GIT_KIND = "<archive source>", "<git source>"


def _source_kind(value: Any) -> str:
    return GIT_KIND if isinstance(value, dict) and "git" in value else ARCHIVE_KIND


# A source is an archive (url + sha256) or a git repository (git + tag + commit).
AnySource = Annotated[
    Annotated[Source, Tag(ARCHIVE_KIND)] | Annotated[GitSource, Tag(GIT_KIND)],
    Discriminator(_source_kind),
]


# CPU architectures, as Debian and OCI platforms name them; amd64 is the native one: its images
# keep the tags they had before the axis existed, another arch's local tags end in -<arch>
ARCHES = ("amd64", "arm64")
NATIVE_ARCH = "amd64"
GNU_TYPES = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}  # the toolchains' names
Arch = Literal["amd64", "arm64"]


@dataclass(frozen=True)
class WheelLock:
    """Every wheel a pip lock file (requirements with ``--hash`` on every line, as ``uv pip
    compile --generate-hashes`` writes it) resolves to for one arch, fetched on the host into one
    wheelhouse archive with the lock inside it; the image installs from it without an index, pip
    checking each file's hash against the lock a second time.

    Its key is the lock's own content with the arch and the Pythons: every file in it is pinned
    by the lock, so the lock names the content as a checksum names a file's."""

    lock: str  # as versions.yaml names it
    lock_sha256: str
    arch: str = NATIVE_ARCH
    path: Path = Path()  # where it was found (context.py): not part of what it is

    pinned = True

    @property
    def sha256(self) -> str:
        pythons = " ".join(LOCK_PYTHONS)
        return hashlib.sha256(f"{self.lock_sha256} {self.arch} {pythons}".encode()).hexdigest()

    @property
    def url(self) -> str:
        return f"pip-lock:{self.lock}?arch={self.arch}"

    @property
    def key(self) -> str:
        return self.url

    @property
    def filename(self) -> str:
        return f"{Path(self.lock).stem}-wheelhouse-{self.arch}.tar"


# The Pythons a lock's wheels are fetched for: Debian 12's (the distro every set builds; a lock
# resolved for it names no file another Python could install).
LOCK_PYTHONS = ("3.11",)
