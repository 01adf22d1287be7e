"""versions.yaml → typed, frozen models. Errors name the file, key path and what was expected."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    create_model,
    field_validator,
    model_validator,
)

from slurmforge import features, refs
from slurmforge.inputs import Model
from slurmforge.pins import (
    _DEB_NAME,
    NATIVE_ARCH,
    UNPINNED,
    AnySource,
    Arch,
    GitSource,
    Int,
    Name,
    Source,
    Str,
    Url,
    Version3,
    WheelLock,
    _image_ref,
    _tag_template,
)
from slurmforge.userspace import Userspace, Wheel


class Bootstrap(Model):
    """A distro built from a Debian-style mirror with mmdebstrap (no registry needed), for each
    arch a cell asks for (the matrix's ``arch`` axis)."""

    suite: Name
    """The distribution's suite (bookworm)."""
    mirror: Url
    """The Debian-style mirror it is bootstrapped from."""
    components: tuple[Name, ...] = Field(min_length=1)
    """The archive's components (main, contrib, ...)."""
    source_date_epoch: Int = Field(ge=0)
    """The timestamp files are given, for reproducible bases."""
    include: tuple[Name, ...] = ()
    """More packages in the base."""


class Distro(Model):
    bootstrap: Bootstrap | None = None
    """Build the base from a mirror with mmdebstrap."""
    image: Annotated[str, Strict(), AfterValidator(_image_ref)] | None = None
    """Or start from this registry image."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Distro:
        if (self.bootstrap is None) == (self.image is None):
            raise ValueError("expected exactly one of 'bootstrap' or 'image'")
        return self


class Slurm(Model):
    sources: tuple[AnySource, ...] = Field(min_length=1)
    """Where Slurm's source comes from: a tarball with sha256, or git with tag and commit."""
    tools: dict[Name, Version3] = Field(default_factory=dict)
    """Tool → the release of it built against this Slurm (for tools with several 'releases')"""
    build_deps: tuple[Annotated[str, Strict(), StringConstraints(pattern=_DEB_NAME)], ...] = ()
    """Distro packages this tag's debian/control does not ask for but its build needs"""


class Cuda(Model):
    runtime: Userspace
    """CUDA user space that jobs link against"""
    build: Userspace
    """The compiler nccl-tests is built with (not installed in any image)"""
    arches: tuple[Annotated[str, Strict(), StringConstraints(pattern=r"^sm_\d{2,3}$")], ...] = (
        Field(default=("sm_80", "sm_90"), min_length=1)
    )
    """GPU generations device code is compiled for (each one more is another nvcc pass per file)"""
    tools: dict[Name, Version3] = Field(default_factory=dict)
    """Tool → the release of it built for this CUDA (for tools picked per CUDA with several
    'releases')"""


class Release(Model):
    sources: tuple[AnySource, ...] = Field(min_length=1)
    """Where this release's source comes from."""


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
    """The one version built."""
    sources: tuple[AnySource, ...] = ()
    """Where it comes from."""
    releases: dict[Version3, Release] = Field(default_factory=dict)
    """Several versions, each cell picking one."""

    @model_validator(mode="after")
    def _has_origin(self) -> Tool:
        hint = " (a URL with sha256, or git with commit)"
        _one_origin(self.version, self.sources, self.releases, "sources", hint)
        return self


class UserspaceRelease(Model):
    userspace: Userspace
    """Where this release's files come from."""


class UserspaceTool(Model):
    """A tool unpacked into the CUDA prefix from wheels, Debian packages or a vendor apt repo:
    one version ('version' + 'userspace') or 'releases' picked per CUDA version."""

    version: Str | None = None
    """The one version unpacked."""
    userspace: Userspace | None = None
    """Where its files come from."""
    releases: dict[Version3, UserspaceRelease] = Field(default_factory=dict)
    """Several versions, each CUDA picking one."""

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
        about = f"{name}, carried by the {', '.join(feature.carried_by)} images"
        if feature.optional:
            fields[name.replace("-", "_")] = (
                kind | None,
                Field(None, alias=name, description=about),
            )
        else:
            fields[name.replace("-", "_")] = (kind, Field(alias=name, description=about))
    return create_model("Tools", __base__=ToolsBase, **fields)


Tools = _tools_model()


class Account(Model):
    uid: Int = Field(ge=1, le=65533)
    """Its user ID, the same in every image and the jail."""
    gid: Int = Field(ge=1, le=65533)
    """Its group ID."""


class Accounts(Model):
    slurm: Account
    """SlurmUser: slurmctld and slurmdbd run as it."""
    munge: Account
    """munged runs as it."""
    mysql: Account
    """MariaDB's server, in the mariadb image"""
    slurmrestd: Account
    """slurmrestd refuses root and SlurmUser: it runs as this one"""
    exporter: Account
    """The Prometheus exporter (unprivileged)"""
    prometheus: Account
    """Prometheus' server, in the prometheus image"""
    openldap: Account
    """slapd, in the slapd image (the embedded directory)"""

    @model_validator(mode="after")
    def _distinct(self) -> Accounts:
        for kind in ("uid", "gid"):
            ids = [getattr(getattr(self, name), kind) for name in type(self).model_fields]
            if len(set(ids)) != len(ids):
                raise ValueError(f"expected a different {kind} for every account, got {ids}")
        return self


class CellSpec(Model):
    distro: Str
    """A distro of `distros`."""
    slurm: Str
    """A Slurm version of `slurm`."""
    cuda: Str
    """A CUDA version of `cuda`."""
    arch: Arch = NATIVE_ARCH
    """Amd64 or arm64."""


class Axes(Model):
    distro: tuple[Str, ...] = Field(min_length=1)
    """Distros of `distros`."""
    slurm: tuple[Str, ...] = Field(min_length=1)
    """Slurm versions of `slurm`."""
    cuda: tuple[Str, ...] = Field(min_length=1)
    """CUDA versions of `cuda`."""
    arch: tuple[Arch, ...] = Field((NATIVE_ARCH,), min_length=1)
    """CPU arches (amd64, arm64)."""

    @field_validator("arch")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate entries in {list(value)}")
        return value


class MatrixSet(Model):
    registry: Annotated[str, Strict(), AfterValidator(refs.registry_prefix)]
    """The registry prefix the set's images are tagged with (HOST[:PORT][/PATH])."""
    tags: tuple[Annotated[str, Strict(), AfterValidator(_tag_template)], ...] = Field(min_length=1)
    """Tag templates, one image tag each ({slurm}, {slurm_series}, {cuda}, {distro}, ...)."""
    matrix: Axes | None = None
    """The cells: every combination of these axes."""
    include: tuple[CellSpec, ...] = ()
    """More cells, one by one."""

    @model_validator(mode="after")
    def _has_cells(self) -> MatrixSet:
        if self.matrix is None and not self.include:
            raise ValueError("expected 'matrix' or 'include' (a set needs at least one cell)")
        return self


class Versions(Model):
    accounts: Accounts
    """The service accounts' IDs, the same in every image."""
    distros: dict[Name, Distro] = Field(min_length=1)
    """The distros images are built on."""
    slurm: dict[Version3, Slurm] = Field(min_length=1)
    """Slurm versions and their sources."""
    cuda: dict[Version3, Cuda] = Field(min_length=1)
    """CUDA versions and their user space."""
    tools: Tools  # type: ignore[valid-type]
    """The tools built beside Slurm (pyxis, enroot, NCCL, nccl-tests, ...)."""
    sets: dict[Name, MatrixSet] = Field(min_length=1)
    """Matrix sets: named groups of cells built and pushed together."""
    site: (
        Annotated[str, Strict(), StringConstraints(pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")]
        | None
    ) = None
    """The site layer: a directory (relative to versions.yaml) whose site.yaml adds the site's
    packages, pip requirements, files and Dockerfile instructions to components (site_layer.py)"""

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
    locked: dict[str, str] = {}
    """Url → sha256 recorded by `invoke lock`"""

    @property
    def root(self) -> Path:
        return self.path.parent

    def sha256_of(self, source: Source | GitSource | Wheel | WheelLock) -> str:
        """The content key: the pinned checksum (a git source's commit), the locked one, or
        ``unpinned``."""
        if isinstance(source, GitSource):
            return source.commit
        return source.sha256 if source.pinned else self.locked.get(source.url, UNPINNED)
