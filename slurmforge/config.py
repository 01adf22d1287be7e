"""versions.yaml → typed, frozen models. Errors name the file, key path and what was expected."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    create_model,
    field_validator,
    model_validator,
)

from slurmforge import features, refs
from slurmforge.inputs import Model, inside
from slurmforge.pins import (
    _DEB_NAME,
    NATIVE_ARCH,
    UNPINNED,
    AnySource,
    Arch,
    GitSource,
    Int,
    Name,
    Sha256,
    Source,
    Str,
    Url,
    Version3,
    WheelLock,
    _image_ref,
    _tag_template,
)


class Bootstrap(Model):
    """A distro built from a Debian-style mirror with mmdebstrap (no registry needed), for each
    arch a cell asks for (the matrix's ``arch`` axis)."""

    suite: Name
    mirror: Url
    components: tuple[Name, ...] = Field(min_length=1)
    source_date_epoch: Int = Field(ge=0)
    include: tuple[Name, ...] = ()


class Distro(Model):
    bootstrap: Bootstrap | None = None
    image: Annotated[str, Strict(), AfterValidator(_image_ref)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Distro:
        if (self.bootstrap is None) == (self.image is None):
            raise ValueError("expected exactly one of 'bootstrap' or 'image'")
        return self


class Slurm(Model):
    sources: tuple[AnySource, ...] = Field(min_length=1)
    # tool → the release of it built against this Slurm (for tools with several 'releases')
    tools: dict[Name, Version3] = Field(default_factory=dict)
    # distro packages this tag's debian/control does not ask for but its build needs
    build_deps: tuple[Annotated[str, Strict(), StringConstraints(pattern=_DEB_NAME)], ...] = ()


_REQUIREMENT = r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!-]*$"


class WheelPin(Model):
    """A binary wheel fetched on the host with pip (by name, from the index pip is set up for),
    pinned per arch: ``sha256`` is the amd64 wheel's, or ``{amd64: …, arm64: …}`` (NVIDIA
    publishes a wheel per platform, so each arch's file has its own checksum)."""

    requirement: Annotated[str, Strict(), StringConstraints(pattern=_REQUIREMENT)]
    sha256: Annotated[
        dict[Arch, Sha256],
        BeforeValidator(lambda v: {NATIVE_ARCH: v} if isinstance(v, str) else v),
        Field(min_length=1),
    ]

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

    repository: Url  # base URL of the flat repository ('deb [signed-by=…] URL /')
    keyring: Source  # its signing key, fetched on the host and verified like any source
    packages: tuple[AptPin, ...] = Field(min_length=1)


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
    debs: tuple[Annotated[Source, AfterValidator(_deb)], ...] = ()
    apt: AptRepo | None = None
    # a pip lock file, relative to versions.yaml: every line pinned with its hashes
    lock: Annotated[str, Strict(), AfterValidator(inside("versions.yaml's directory"))] | None = (
        None
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Userspace:
        kinds = [bool(self.wheels or self.debs), self.apt is not None, self.lock is not None]
        if sum(kinds) != 1:
            raise ValueError("expected 'wheels' and/or 'debs', or 'apt' or 'lock' on its own")
        return self

    @property
    def kind(self) -> str:
        return "apt" if self.apt is not None else "lock" if self.lock is not None else "files"


class Cuda(Model):
    runtime: Userspace  # CUDA user space that jobs link against
    build: Userspace  # the compiler nccl-tests is built with (not installed in any image)
    # GPU generations device code is compiled for (each one more is another nvcc pass per file)
    arches: tuple[Annotated[str, Strict(), StringConstraints(pattern=r"^sm_\d{2,3}$")], ...] = (
        Field(default=("sm_80", "sm_90"), min_length=1)
    )
    # tool → the release of it built for this CUDA (tools picked per CUDA with several 'releases')
    tools: dict[Name, Version3] = Field(default_factory=dict)


class Release(Model):
    sources: tuple[AnySource, ...] = Field(min_length=1)


def _one_origin(version: object, origin: object, releases: dict, what: str, hint: str) -> None:
    """Either one version (with its ``what``) or several 'releases', each cell picking one."""
    if releases:
        if version is not None or origin:
            raise ValueError(f"expected either 'releases' or 'version' with its {what}")
    elif version is None:
        raise ValueError("expected 'version' (or 'releases')")
    elif not origin:
        raise ValueError(f"expected '{what}'{hint} or 'releases'")


class Tool(Model):
    """A tool compiled from source: one version ('version' + 'sources'), or several 'releases' of
    which each cell picks one: under slurm.<version>.tools for a tool built against Slurm (pyxis,
    enroot), under cuda.<version>.tools for one built against CUDA (features.Feature.axis)."""

    version: Str | None = None
    sources: tuple[AnySource, ...] = ()
    releases: dict[Version3, Release] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _has_origin(self) -> Tool:
        hint = " (a URL with sha256, or git with commit)"
        _one_origin(self.version, self.sources, self.releases, "sources", hint)
        return self


class UserspaceRelease(Model):
    userspace: Userspace


class UserspaceTool(Model):
    """A tool unpacked into the CUDA prefix from wheels, Debian packages or a vendor apt repo:
    one version ('version' + 'userspace') or 'releases' picked per CUDA version."""

    version: Str | None = None
    userspace: Userspace | None = None
    releases: dict[Version3, UserspaceRelease] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _has_origin(self) -> UserspaceTool:
        _one_origin(self.version, self.userspace, self.releases, "userspace", "")
        return self


AnyTool = Tool | UserspaceTool


class ToolsBase(Model):
    """``tools:``, one typed field per row of features.FEATURES (built by ``_tools_model``)."""

    def get(self, name: str) -> AnyTool | None:
        return getattr(self, name.replace("-", "_"), None)

    def __getitem__(self, name: str) -> AnyTool:
        tool = self.get(name)
        if tool is None:
            raise KeyError(name)
        return tool

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def items(self) -> list[tuple[str, AnyTool]]:
        pairs = ((name, self.get(name)) for name in features.tools())
        return [(name, tool) for name, tool in pairs if tool is not None]

    def names(self) -> list[str]:
        return [name for name, _ in self.items()]


def _tools_model() -> type[ToolsBase]:
    fields: dict[str, Any] = {}
    for name, feature in features.tools().items():
        kind: Any = UserspaceTool if feature.origin is features.Origin.USERSPACE else Tool
        if feature.optional:
            fields[name.replace("-", "_")] = (kind | None, Field(None, alias=name))
        else:
            fields[name.replace("-", "_")] = (kind, Field(alias=name))
    return create_model("Tools", __base__=ToolsBase, **fields)


Tools = _tools_model()


class Account(Model):
    uid: Int = Field(ge=1, le=65533)
    gid: Int = Field(ge=1, le=65533)


class Accounts(Model):
    slurm: Account
    munge: Account
    mysql: Account  # MariaDB's server, in the mariadb image
    slurmrestd: Account  # slurmrestd refuses root and SlurmUser: it runs as this one
    exporter: Account  # the Prometheus exporter (unprivileged)
    prometheus: Account  # Prometheus' server, in the prometheus image
    openldap: Account  # slapd, in the slapd image (the embedded directory)

    @model_validator(mode="after")
    def _distinct(self) -> Accounts:
        for kind in ("uid", "gid"):
            ids = [getattr(getattr(self, name), kind) for name in type(self).model_fields]
            if len(set(ids)) != len(ids):
                raise ValueError(f"expected a different {kind} for every account, got {ids}")
        return self


class CellSpec(Model):
    distro: Str
    slurm: Str
    cuda: Str
    arch: Arch = NATIVE_ARCH


class Axes(Model):
    distro: tuple[Str, ...] = Field(min_length=1)
    slurm: tuple[Str, ...] = Field(min_length=1)
    cuda: tuple[Str, ...] = Field(min_length=1)
    arch: tuple[Arch, ...] = Field((NATIVE_ARCH,), min_length=1)

    @field_validator("arch")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate entries in {list(value)}")
        return value


class MatrixSet(Model):
    registry: Annotated[str, Strict(), AfterValidator(refs.registry_prefix)]
    tags: tuple[Annotated[str, Strict(), AfterValidator(_tag_template)], ...] = Field(min_length=1)
    matrix: Axes | None = None
    include: tuple[CellSpec, ...] = ()

    @model_validator(mode="after")
    def _has_cells(self) -> MatrixSet:
        if self.matrix is None and not self.include:
            raise ValueError("expected 'matrix' or 'include' (a set needs at least one cell)")
        return self


class Versions(Model):
    accounts: Accounts
    distros: dict[Name, Distro] = Field(min_length=1)
    slurm: dict[Version3, Slurm] = Field(min_length=1)
    cuda: dict[Version3, Cuda] = Field(min_length=1)
    tools: Tools  # type: ignore[valid-type]
    sets: dict[Name, MatrixSet] = Field(min_length=1)
    # the site layer: a directory (relative to versions.yaml) whose site.yaml adds the site's
    # packages, pip requirements, files and Dockerfile instructions to components (site_layer.py)
    site: (
        Annotated[str, Strict(), StringConstraints(pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")]
        | None
    ) = None

    def picks(self, name: str) -> dict[str, dict[str, str]]:
        """Axis value → its 'tools' picks, on the axis that chooses ``name``'s release."""
        entries: dict[str, Slurm | Cuda] = getattr(self, features.FEATURES[name].axis)
        return {version: dict(entry.tools) for version, entry in entries.items()}

    def release(self, name: str, slurm: str | None, cuda: str | None) -> tuple[str, Any]:
        """The version of tool ``name`` built for a cell and what it is made from: its sources
        (a compiled tool) or its Userspace (one unpacked into the CUDA prefix)."""
        tool = self.tools[name]
        kind = "userspace" if isinstance(tool, UserspaceTool) else "sources"
        if not tool.releases:
            assert tool.version is not None
            return tool.version, getattr(tool, kind)
        axis = features.FEATURES[name].axis
        entries: dict[str, Slurm | Cuda] = getattr(self, axis)
        cell = {"slurm": slurm, "cuda": cuda}[axis]
        version = dict(entries[cell or ""].tools)[name]  # checked at load time
        return version, getattr(tool.releases[version], kind)


class Config(BaseModel):
    """The loaded configuration: the validated document plus where it came from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    path: Path
    versions: Versions
    locked: dict[str, str] = {}  # url → sha256 recorded by `invoke lock`

    @property
    def root(self) -> Path:
        return self.path.parent

    def sha256_of(self, source: Source | GitSource | Wheel | WheelLock) -> str:
        """The content key: the pinned checksum (a git source's commit), the locked one, or
        ``unpinned``."""
        if isinstance(source, GitSource):
            return source.commit
        return source.sha256 if source.pinned else self.locked.get(source.url, UNPINNED)
