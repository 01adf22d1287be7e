"""versions.yaml → typed, frozen models. Errors name the file, key path and what was expected."""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    StringConstraints,
    Tag,
    ValidationError,
    create_model,
    model_validator,
)

from slurmforge import features, refs, state
from slurmforge.errors import ConfigError, quote

UNPINNED = "unpinned"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VERSION3 = r"^\d+\.\d+\.\d+$"
_COMMIT = r"^[0-9a-f]{40}$"
_NAME = r"^[a-z0-9][a-z0-9._-]*$"
_DEB_NAME = r"^[a-z0-9][a-z0-9+.-]+$"  # a Debian package name (Debian policy 5.6.1)
TAG_FIELDS = frozenset({"slurm", "slurm_series", "cuda", "distro", "component"})


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
Version3 = Annotated[str, Strict(), StringConstraints(pattern=_VERSION3)]
Name = Annotated[str, Strict(), StringConstraints(pattern=_NAME)]
GitUrl = Annotated[str, Strict(), AfterValidator(_git_url)]
Commit = Annotated[str, Strict(), StringConstraints(pattern=_COMMIT)]
GitTag = Annotated[str, Strict(), StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(Model):
    url: Url
    sha256: Sha256

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
    tag: GitTag
    commit: Commit

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


class Bootstrap(Model):
    """A distro built from a Debian-style mirror with mmdebstrap (no registry needed)."""

    suite: Name
    mirror: Url
    components: tuple[Name, ...] = Field(min_length=1)
    arch: Literal["amd64", "arm64"]
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
    tools: dict[Name, Version3] = {}
    # distro packages this tag's debian/control does not ask for but its build needs
    build_deps: tuple[Annotated[str, Strict(), StringConstraints(pattern=_DEB_NAME)], ...] = ()


_REQUIREMENT = r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!-]*$"


class Wheel(Model):
    """A binary wheel fetched on the host with pip (by name, from the index pip is set up for)."""

    requirement: Annotated[str, Strict(), StringConstraints(pattern=_REQUIREMENT)]
    sha256: Sha256

    @property
    def pinned(self) -> bool:
        return self.sha256 != UNPINNED

    @property
    def url(self) -> str:  # the key under which fetches and locks record it
        return f"pip:{self.requirement}"

    @property
    def key(self) -> str:
        return self.url

    @property
    def filename(self) -> str:
        name, version = self.requirement.split("==")
        return f"{re.sub(r'[-.]+', '_', name).lower()}-{version}.whl"


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
    installed with dpkg), or a vendor apt repository on its own."""

    wheels: tuple[Wheel, ...] = ()
    debs: tuple[Annotated[Source, AfterValidator(_deb)], ...] = ()
    apt: AptRepo | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Userspace:
        files = bool(self.wheels or self.debs)
        if files == (self.apt is not None):
            raise ValueError("expected 'wheels' and/or 'debs', or 'apt' on its own")
        return self

    @property
    def kind(self) -> str:
        return "apt" if self.apt is not None else "files"


class Cuda(Model):
    runtime: Userspace  # CUDA user space that jobs link against
    build: Userspace  # the compiler nccl-tests is built with (not installed in any image)
    # GPU generations device code is compiled for (each one more is another nvcc pass per file)
    arches: tuple[Annotated[str, Strict(), StringConstraints(pattern=r"^sm_\d{2,3}$")], ...] = (
        Field(default=("sm_80", "sm_90"), min_length=1)
    )


class Release(Model):
    sources: tuple[AnySource, ...] = Field(min_length=1)


class Tool(Model):
    """A tool compiled from source: one version ('version' + 'sources'), or several 'releases' of
    which each Slurm version picks one under slurm.<version>.tools (a plugin built against
    Slurm's headers)."""

    version: Str | None = None
    sources: tuple[AnySource, ...] = ()
    releases: dict[Version3, Release] = {}

    @model_validator(mode="after")
    def _has_origin(self) -> Tool:
        if self.releases:
            if self.version is not None or self.sources:
                raise ValueError("expected either 'releases' or 'version' with its sources")
        elif self.version is None:
            raise ValueError("expected 'version' (or 'releases')")
        elif not self.sources:
            raise ValueError(
                "expected 'sources' (a URL with sha256, or git with commit) or 'releases'"
            )
        return self


class UserspaceTool(Model):
    """A tool unpacked into the CUDA prefix from wheels, Debian packages or a vendor apt repo."""

    version: Str
    userspace: Userspace


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


class Axes(Model):
    distro: tuple[Str, ...] = Field(min_length=1)
    slurm: tuple[Str, ...] = Field(min_length=1)
    cuda: tuple[Str, ...] = Field(min_length=1)


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

    def tool(self, name: str, slurm: str | None) -> tuple[str, tuple[Source | GitSource, ...]]:
        """The version and sources of tool ``name`` as built for Slurm ``slurm``."""
        tool = self.tools[name]
        if isinstance(tool, UserspaceTool):
            return tool.version, ()
        if not tool.releases:
            assert tool.version is not None
            return tool.version, tool.sources
        version = self.slurm[slurm or ""].tools[name]  # checked at load time
        return version, tool.releases[version].sources


class Config(BaseModel):
    """The loaded configuration: the validated document plus where it came from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    path: Path
    versions: Versions
    locked: dict[str, str] = {}  # url → sha256 recorded by `invoke lock`

    @property
    def root(self) -> Path:
        return self.path.parent

    def sha256_of(self, source: Source | GitSource | Wheel) -> str:
        """The content key: the pinned checksum (a git source's commit), the locked one, or
        ``unpinned``."""
        if isinstance(source, GitSource):
            return source.commit
        return source.sha256 if source.pinned else self.locked.get(source.url, UNPINNED)


MAX_FILE_BYTES = 1 << 20  # a config file larger than this is refused before it is parsed
MAX_NODES = 100_000  # YAML nodes after expanding aliases (a small file can expand to billions)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate and non-scalar mapping keys instead of keeping the last
    (or failing on an unhashable one), and aliases that expand a document past MAX_NODES."""

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        _count_nodes(node, {}, set())
        return node


def _count_nodes(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many nodes ``node`` stands for once its aliases are expanded (shared nodes are counted
    once per use, computed once); a YAMLError past MAX_NODES or on a recursive alias."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_:
        raise yaml.composer.ComposerError(
            None, None, "an alias refers to a node that contains it", node.start_mark
        )
    open_.add(id(node))
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_count_nodes(child, sizes, open_) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(
            _count_nodes(k, sizes, open_) + _count_nodes(v, sizes, open_) for k, v in node.value
        )
    open_.discard(id(node))
    if size > MAX_NODES:
        raise yaml.composer.ComposerError(
            None,
            None,
            f"aliases expand this document past {MAX_NODES} values; repeat fewer",
            node.start_mark,
        )
    sizes[id(node)] = size
    return size


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(
                None,
                None,
                "a key must be a plain value, not a list or mapping",
                key_node.start_mark,
            )
        key = loader.construct_object(key_node)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {line})", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def format_path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if part in ("[key]", ARCHIVE_KIND, GIT_KIND):
            # pydantic's markers: the key itself was invalid; the branch of a source union
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][\w-]*", part):
            out += f".{part}" if out else part
        else:
            out += f'."{part}"' if out else f'"{part}"'
    return out or "(top level)"


def _describe(err: dict[str, Any]) -> str:
    kind, msg, value = err["type"], err["msg"], err.get("input")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "string_pattern_mismatch":
        pattern = err["ctx"]["pattern"]
        wanted = {
            _VERSION3: "a version like '24.11.5'",
            _COMMIT: "a full commit ID (40 lowercase hex digits)",
        }.get(pattern, f"a value matching {pattern}")
        return f"expected {wanted}, got {quote(value)}"
    if kind.endswith("_type") or kind in ("model_type", "dict_type", "tuple_type"):
        return f"{msg.lower()}, got {type(value).__name__} {quote(value)}"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    return f"{msg}, got {quote(value)}"


def _pick(errors: list[dict[str, Any]]) -> dict[str, Any]:
    # pydantic reports every failing branch; the deepest location is the most useful one.
    return max(errors, key=lambda e: len(e["loc"]))


M = TypeVar("M", bound=BaseModel)


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping (duplicate keys refused); ConfigError naming the file and line otherwise.
    The file is read as bytes (at most MAX_FILE_BYTES) and decoded as strict UTF-8."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB; a config file is far smaller"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: byte {exc.start}: not UTF-8 (0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None
    try:
        parsed = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}:{where}: invalid YAML: {problem}") from None
    if not isinstance(parsed, dict):
        raise ConfigError(
            f"{path}: expected a mapping at the top level, got {type(parsed).__name__}"
        )
    return parsed


Blame = Callable[[tuple[str | int, ...]], tuple[Path, tuple[str | int, ...]]]


def validate(
    model: type[M],
    data: Any,
    path: Path,
    loc: tuple[str | int, ...] = (),
    blame: Blame | None = None,
) -> M:
    """``model`` from ``data``; a ConfigError with file and key path (under ``loc``) otherwise.
    ``blame`` maps a key path to the file (and its key path) that gave the value there, for data
    merged from several files."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = _pick(exc.errors())
        where = loc + tuple(p for p in err["loc"] if p not in (ARCHIVE_KIND, GIT_KIND))
        if blame is not None:
            path, where = blame(where)
        raise ConfigError(f"{path}: {format_path(where)}: {_describe(err)}") from None


def load(path: Path) -> Config:
    """Parse and validate ``path`` (and its lock file); raise ConfigError with file and key path."""
    from slurmforge import matrix  # here: matrix imports this module

    versions = validate(Versions, read_yaml(path), path)
    _check_references(path, versions)
    config = Config(path=path, versions=versions, locked=state.read_sources_lock(path))
    matrix.check_tags(config)
    return config


def _check_references(path: Path, v: Versions) -> None:
    known = {"distro": v.distros, "slurm": v.slurm, "cuda": v.cuda}
    label = {"distro": "distro", "slurm": "Slurm version", "cuda": "CUDA version"}
    for set_name, mset in v.sets.items():
        if mset.matrix is not None:
            for axis in ("distro", "slurm", "cuda"):
                values = getattr(mset.matrix, axis)
                for i, value in enumerate(values):
                    if value not in known[axis]:
                        _unknown(
                            path,
                            ("sets", set_name, "matrix", axis, i),
                            label[axis],
                            value,
                            known[axis],
                        )
                if len(set(values)) != len(values):
                    raise ConfigError(
                        f"{path}: {format_path(('sets', set_name, 'matrix', axis))}: "
                        f"duplicate entries in {list(values)}"
                    )
        for i, cell in enumerate(mset.include):
            for axis in ("distro", "slurm", "cuda"):
                value = getattr(cell, axis)
                if value not in known[axis]:
                    _unknown(
                        path,
                        ("sets", set_name, "include", i, axis),
                        label[axis],
                        value,
                        known[axis],
                    )
    for name, tool in v.tools.items():
        releases = tool.releases if isinstance(tool, Tool) else {}
        for version, slurm in v.slurm.items():
            picked = slurm.tools.get(name)
            where = format_path(("slurm", version, "tools", name))
            if releases and picked is None:
                raise ConfigError(
                    f"{path}: {where}: required key is missing (tools.{name} has several "
                    f"releases; pick one of {', '.join(releases)} for Slurm {version})"
                )
            if picked is not None and picked not in releases:
                raise ConfigError(
                    f"{path}: {where}: unknown release {picked!r}; expected one of "
                    f"{', '.join(releases) or '(none: the tool has no releases)'}"
                )
    for version, slurm in v.slurm.items():
        for name in slurm.tools:
            if name not in v.tools:
                raise ConfigError(
                    f"{path}: {format_path(('slurm', version, 'tools', name))}: unknown tool"
                )
    for name, distro in v.distros.items():
        if distro.bootstrap and not distro.bootstrap.mirror.startswith(("http://", "https://")):
            raise ConfigError(
                f"{path}: distros.{name}.bootstrap.mirror: expected an http(s) Debian mirror"
            )


def _unknown(
    path: Path, loc: tuple[str | int, ...], what: str, value: str, known: dict[str, Any]
) -> None:
    raise ConfigError(
        f"{path}: {format_path(loc)}: unknown {what} {quote(value)}; "
        f"expected one of {', '.join(sorted(known))}"
    )
