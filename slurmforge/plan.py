"""Decide, per target, whether to build or reuse, and say why (which input changed)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from slurmforge import bootstrap
from slurmforge.config import UNPINNED, Config, GitSource, Source, Userspace, Wheel
from slurmforge.engine import HASH_LABEL, MANIFEST_LABEL, Engine, ImageInfo
from slurmforge.matrix import COMPONENTS, Axis, Target
from slurmforge.render import ContextFile, ContextFiles, DockerfileRenderer, Rendered, inputs_hash
from slurmforge.sources import Cache


class Action(StrEnum):
    BUILD = "build"
    CACHED = "cached"


@dataclass(frozen=True)
class Decision:
    target: Target
    action: Action
    reason: str
    inputs_hash: str | None  # None while a parent is still to be built
    manifest: dict[str, Any] | None
    rendered: Rendered | None  # None for bootstrapped bases
    existing: ImageInfo | None

    def labels(self) -> dict[str, str]:
        assert self.inputs_hash is not None and self.manifest is not None
        return {
            HASH_LABEL: self.inputs_hash,
            MANIFEST_LABEL: json.dumps(self.manifest, sort_keys=True, separators=(",", ":")),
        }


Artifact = Source | GitSource | Wheel


@dataclass(frozen=True)
class Need:
    """One upstream artifact a target's build context needs (``candidates`` are alternatives)."""

    name: str  # render key: 'slurm', 'pyxis', 'cuda/0', …
    candidates: tuple[Artifact, ...]
    optional: bool = False  # a feature: skipped, and said so, when it cannot be had
    requires: str = ""  # wanted only when this optional need is present

    @property
    def feature(self) -> str:
        return self.name.split("/", 1)[0]

    def arcname(self, artifact: Artifact) -> str:
        if self.name == "slurm":  # at the context root, as the cached Slurm compile layer expects
            return artifact.filename
        if isinstance(artifact, Wheel):
            return f"wheels/{artifact.filename}"
        return f"sources/{self.feature}/{artifact.filename}"


def _userspace_needs(group: str, space: Userspace | None, **kw: Any) -> list[Need]:
    if space is None:
        return []
    artifacts: tuple[Artifact, ...] = (
        (space.apt.keyring,) if space.apt is not None else (*space.wheels, *space.debs)
    )
    # one need per wheel or package (or the apt keyring), named '<group>/<index>'
    return [Need(f"{group}/{i}", (a,), **kw) for i, a in enumerate(artifacts)]


def needs(config: Config, target: Target) -> list[Need]:
    """A target's upstream artifacts, from its component's ``sources`` (``name?``: optional)."""
    v = config.versions
    cuda = v.cuda.get(target.coord(Axis.CUDA) or "")
    out: list[Need] = []
    for spec in COMPONENTS[target.component].sources:
        name = spec.rstrip("?")
        if name == "slurm":
            out.append(Need(name, v.slurm[target.coord(Axis.SLURM) or ""].sources))
        elif name == "cuda" and cuda is not None:
            out += _userspace_needs("cuda", cuda.runtime)
        elif name == "cuda-build" and cuda is not None:
            out += _userspace_needs("cuda-build", cuda.build)
        elif name in v.tools and v.tools[name].userspace is not None:
            out += _userspace_needs(name, v.tools[name].userspace)
        elif name in v.tools:
            _, sources = v.tool(name, target.coord(Axis.SLURM))
            out.append(Need(name, sources, optional=spec.endswith("?")))
    return out


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Names of the inputs that differ, one level deep (e.g. ``files:sshd_config``)."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        o, n = old.get(key), new.get(key)
        if o == n:
            continue
        if isinstance(o, dict) and isinstance(n, dict):
            out += [f"{key}:{sub}" for sub in sorted(set(o) | set(n)) if o.get(sub) != n.get(sub)]
        else:
            out.append(key)
    return out


class ContextSources:
    """Build-context entries for a target's upstream sources (no Docker needed).

    A required source is named by its pinned (or locked, or fetched) sha256 and need not be cached
    yet: its content is already defined by the checksum. An optional one is in only when it is
    cached, so the same inputs always render the same Dockerfile.
    """

    def __init__(self, config: Config, cache: Cache, fetched: dict[str, str] | None = None) -> None:
        self.config = config
        self.cache = cache
        self.fetched = fetched or {}  # artifact key → sha256 of what this run downloaded

    def _sha(self, source: Artifact) -> str:
        return self.fetched.get(source.key) or self.config.sha256_of(source)

    def cached(self, need: Need) -> tuple[Artifact, str] | None:
        for cand in need.candidates:
            sha = self._sha(cand)
            if sha != UNPINNED and self.cache.lookup(sha, cand.filename):
                return cand, sha
        return None

    def __call__(self, target: Target) -> ContextFiles:
        files: dict[str, ContextFile] = {}
        skipped: list[str] = []
        wanted = needs(self.config, target)
        for need in wanted:
            hit = self.cached(need)
            if need.optional and (hit is None or (need.requires and need.requires in skipped)):
                if need.feature not in skipped:
                    skipped.append(need.feature)
                continue
            source, sha = hit or (need.candidates[0], self._sha(need.candidates[0]))
            path = self.cache.root / sha / source.filename
            files[need.name] = ContextFile(need.arcname(source), path, sha, 0o644)
        dependents = {n.requires: n.feature for n in wanted if n.requires}
        for feature, helper in dependents.items():  # e.g. nccl-tests cannot build without nvcc
            if helper in skipped and feature not in skipped:
                files = {k: f for k, f in files.items() if k.split("/", 1)[0] != feature}
                skipped.append(feature)
        return ContextFiles(
            files, tuple(sorted(f for f in skipped if f not in dependents.values()))
        )


def is_bootstrap(config: Config, target: Target) -> bool:
    distro = config.versions.distros[target.coord(Axis.DISTRO) or ""]
    return target.component == "base" and distro.bootstrap is not None


def parent_refs(target: Target, targets: dict[str, Target]) -> dict[str, str]:
    return {pid.split("/", 1)[0]: targets[pid].ref for pid in target.parents}


class Planner:
    def __init__(
        self,
        config: Config,
        engine: Engine,
        renderer: DockerfileRenderer,
        sources: ContextSources,
        targets: Iterable[Target],
    ) -> None:
        self.config = config
        self.targets = {t.id: t for t in targets}
        self.engine = engine
        self.renderer = renderer
        self.sources = sources

    def evaluate(self, target: Target, parents: dict[str, Decision | str]) -> Decision:
        """``parents``: parent target id → its image ID, or its (pending) decision."""
        existing = self.engine.inspect(target.ref)
        pending = [pid for pid, p in parents.items() if isinstance(p, Decision)]
        rendered = None
        if is_bootstrap(self.config, target):
            spec = self.config.versions.distros[target.coord(Axis.DISTRO) or ""].bootstrap
            assert spec is not None
            manifest: dict[str, Any] = bootstrap.manifest(spec)
        else:
            rendered = self.renderer.render(
                target, parent_refs(target, self.targets), self.sources(target)
            )
            ids = {pid: p for pid, p in parents.items() if isinstance(p, str)}
            manifest = rendered.manifest(ids)
        unpinned = any(f.sha256 == UNPINNED for f in (rendered.files if rendered else ()))
        if pending or unpinned:  # the hash cannot be known yet
            why = f"parent {pending[0]} will be rebuilt" if pending else "source not pinned yet"
            return Decision(target, Action.BUILD, why, None, None, rendered, existing)
        digest = inputs_hash(manifest)
        if existing is None:
            reason, action = "no image yet", Action.BUILD
        elif existing.inputs_hash == digest:
            reason, action = "inputs unchanged", Action.CACHED
        elif existing.inputs_hash is None:
            reason, action = "existing image has no inputs label", Action.BUILD
        else:
            changed = changes(existing.manifest, manifest) or ["inputs"]
            reason, action = "changed: " + ", ".join(changed), Action.BUILD
        return Decision(target, action, reason, digest, manifest, rendered, existing)
