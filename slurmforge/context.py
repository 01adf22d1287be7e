"""What goes into a target's build: its upstream sources, its parents, or a bootstrap spec.

No Docker here. A target's needs come from its component's own ``sources`` (Slurm, the CUDA
runtime) and from every feature built in that component (features.py). ``ContextSources`` turns
the needs into build-context entries named by sha256, and says which optional features a target
goes without. Whether to build or reuse is decided elsewhere (plan.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from slurmforge import features
from slurmforge.bootstrap import Base
from slurmforge.config import Config, UserspaceTool
from slurmforge.errors import ConfigError
from slurmforge.matrix import COMPONENTS, Axis, BuildTarget
from slurmforge.pins import NATIVE_ARCH, UNPINNED, GitSource, Source, WheelLock
from slurmforge.render import ContextFile, ContextFiles
from slurmforge.sources import Cache
from slurmforge.userspace import Userspace, Wheel

Artifact = Source | GitSource | Wheel | WheelLock


@dataclass(frozen=True)
class Need:
    """One upstream artifact a target's build context needs (``candidates`` are alternatives)."""

    name: str  # render key: 'slurm', 'pyxis', 'cuda/0', …
    candidates: tuple[Artifact, ...]
    feature: str = ""  # the feature it belongs to ('' for Slurm itself)
    optional: bool = False  # the feature may be left out, and said so, when it cannot be had

    @property
    def group(self) -> str:
        return self.name.split("/", 1)[0]

    def arcname(self, artifact: Artifact) -> str:
        if self.name == "slurm":  # at the context root, as the cached Slurm compile layer expects
            return artifact.filename
        if isinstance(artifact, Wheel | WheelLock):
            return f"wheels/{artifact.filename}"
        return f"sources/{self.group}/{artifact.filename}"


def _userspace(
    config: Config, target: BuildTarget, key: str, space: Userspace, arch: str, **kw: Any
) -> list[Need]:
    """One need per file of a user space (a wheel, a package, the apt keyring), named
    '<group>/<index>', for ``arch``: refused in one line when the space has none pinned for it."""
    group = kw.pop("group")
    if space.lock is not None:
        artifacts: tuple[Artifact, ...] = (_lock(config, f"{key}.lock", space.lock, arch),)
    elif space.apt is not None:
        if arch != NATIVE_ARCH:  # one repository URL, NVIDIA's x86_64 one (sbsa has its own)
            _refuse(config, target, f"{key}.apt", "names one repository, for amd64")
        artifacts = (space.apt.keyring,)
    else:
        wheels: list[Artifact] = []
        for i, pin in enumerate(space.wheels):
            wheel = pin.for_arch(arch)
            if wheel is None:
                pinned = ", ".join(pin.sha256)
                _refuse(config, target, f"{key}.wheels[{i}].sha256",
                        f"{pin.requirement} is pinned for {pinned} only",
                        f"; expected sha256: {{{pinned}: …, {arch}: …}}")  # fmt: skip
            wheels.append(wheel)
        for i, deb in enumerate(space.debs):
            deb_arch = deb.filename.rsplit("_", 1)[-1].removesuffix(".deb")
            if deb_arch not in (arch, "all"):
                _refuse(config, target, f"{key}.debs[{i}]", f"{deb.filename} is for {deb_arch}")
        artifacts = (*wheels, *space.debs)
    return [Need(f"{group}/{i}", (a,), **kw) for i, a in enumerate(artifacts)]


_LOCK_SHAS: dict[tuple[Path, int, int], str] = {}  # (path, mtime, size) → its sha256
_TOOL = Path(__file__).resolve().parent.parent  # slurmforge's own directory


def _lock(config: Config, key: str, lock: str, arch: str) -> WheelLock:
    """The wheelhouse of a lock file for ``arch`` (a plan of thousands of targets reads each lock
    once): refused in one line when the file cannot be read. The file is looked for beside
    versions.yaml, then in slurmforge's own directory (where the shipped locks are)."""
    path = config.root / lock
    if not path.exists() and (_TOOL / lock).exists():
        path = _TOOL / lock
    try:
        stat = path.stat()
        seen = (path, stat.st_mtime_ns, stat.st_size)
        if seen not in _LOCK_SHAS:
            _LOCK_SHAS[seen] = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(
            f"{config.path}: {key}: cannot read {lock} ({exc.strerror})",
            hint="expected a pip lock file (every requirement with its hashes), relative to "
            "versions.yaml or to slurmforge's own directory",
        ) from None
    return WheelLock(lock, _LOCK_SHAS[seen], arch, path)


def _source(config: Config, target: BuildTarget, name: str, **kw: Any) -> list[Need]:
    """The needs of one upstream source: 'slurm', 'cuda', 'cuda-build' or a tool's name. GPU
    user space is for the target's arch, but the compiler nccl-tests is built with is for the
    arch builds run on ('cuda-build'): another arch's nccl-tests is cross-compiled, linked
    against that arch's runtime and NCCL."""
    v = config.versions
    cuda = v.cuda.get(target.cuda or "")
    if name == "slurm":
        return [Need(name, v.slurm[target.slurm or ""].sources, **kw)]
    if name in ("cuda", "cuda-build"):
        assert cuda is not None, f"{target.id} has no CUDA axis"
        space, arch = (cuda.runtime, target.arch) if name == "cuda" else (cuda.build, NATIVE_ARCH)
        part = "runtime" if name == "cuda" else "build"
        key = f'cuda."{target.cuda}".{part}'
        return _userspace(config, target, key, space, arch, group=name, **kw)
    _, made_of = v.release(name, target.slurm, target.cuda)
    if isinstance(v.tools[name], UserspaceTool):
        key = f"tools.{name}"
        return _userspace(config, target, key, made_of, target.arch, group=name, **kw)
    return [Need(name, made_of, **kw)]


def _refuse(
    config: Config, target: BuildTarget, key: str, why: str, expected: str = ""
) -> NoReturn:
    """GPU user space that ``target``'s arch cannot load: refused before anything is fetched
    or built, rather than an image whose libraries the node cannot load."""
    cells = ", ".join(c.name for c in target.cells)
    raise ConfigError(
        f"{config.path}: {key}: {why}, and cell {cells} is {target.arch}{expected}",
        hint="pin it for that arch, or build that cell's images without GPU user space: "
        + " ".join(
            f"--component {n}"
            for n, c in COMPONENTS.items()
            if c.public and Axis.CUDA not in c.axes
        ),
    )


def needs(config: Config, target: BuildTarget) -> list[Need]:
    """A target's upstream artifacts: its component's own sources, then its features'."""
    out: list[Need] = []
    for name in COMPONENTS[target.component].sources:
        out += _source(config, target, name)
    for feature in features.built_in(target.component):
        kw = {"feature": feature.name, "optional": feature.optional}
        for name in (feature.name, *feature.needs):
            out += _source(config, target, name, **kw)
    return out


class ContextSources:
    """Build-context entries for a target's upstream sources (no Docker needed).

    A required source is named by its pinned (or locked, or fetched) sha256 and need not be cached
    yet: its content is already defined by the checksum. An optional feature is in only when all
    of its sources are cached, so the same inputs always render the same Dockerfile.
    """

    def __init__(self, config: Config, cache: Cache, fetched: dict[str, str] | None = None) -> None:
        self.config = config
        self.cache = cache
        self.fetched = fetched if fetched is not None else {}  # key → sha256 fetched this run
        self._found: dict[tuple[str, str], bool] = {}  # (sha256, filename) → in the cache
        self._paths: dict[tuple[str, str], Path] = {}

    def _sha(self, source: Artifact) -> str:
        return self.fetched.get(source.key) or self.config.sha256_of(source)

    def _in_cache(self, sha: str, filename: str) -> bool:
        """Looked up once per artifact: a plan of thousands of targets shares a few dozen.
        (Only ever found, never lost: a fetch adds to the cache and deletes nothing.)"""
        key = (sha, filename)
        if not self._found.get(key):
            self._found[key] = self.cache.lookup(sha, filename) is not None
        return self._found[key]

    def _path(self, sha: str, filename: str) -> Path:
        key = (sha, filename)
        if key not in self._paths:
            self._paths[key] = self.cache.root / sha / filename
        return self._paths[key]

    def cached(self, need: Need) -> tuple[Artifact, str] | None:
        for cand in need.candidates:
            sha = self._sha(cand)
            if sha != UNPINNED and self._in_cache(sha, cand.filename):
                return cand, sha
        return None

    def __call__(self, target: BuildTarget) -> ContextFiles:
        wanted = needs(self.config, target)
        skipped = sorted({n.feature for n in wanted if n.optional and self.cached(n) is None})
        files: dict[str, ContextFile] = {}
        for need in wanted:
            if need.feature in skipped:
                continue
            first = need.candidates[0]
            source, sha = self.cached(need) or (first, self._sha(first))
            path = self._path(sha, source.filename)
            files[need.name] = ContextFile(need.arcname(source), path, sha, 0o644)
        return ContextFiles(files, tuple(skipped))


def bootstrap_of(config: Config, target: BuildTarget) -> Base | None:
    """The mmdebstrap spec of a bootstrapped base, for its arch (None: built from a
    Dockerfile)."""
    if target.component != "base":
        return None
    spec = config.versions.distros[target.distro].bootstrap
    return None if spec is None else Base(spec, target.arch)


def parent_refs(target: BuildTarget, targets: dict[str, BuildTarget]) -> dict[str, str]:
    """Component → image reference of each parent."""
    return {pid.split("/", 1)[0]: targets[pid].ref for pid in target.parents}
