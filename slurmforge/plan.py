"""Decide, per target, whether to build or reuse, and say why (which input changed)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from slurmforge import bootstrap
from slurmforge.config import UNPINNED, Config, Source
from slurmforge.engine import HASH_LABEL, MANIFEST_LABEL, Engine, ImageInfo
from slurmforge.matrix import COMPONENTS, Axis, Target
from slurmforge.render import ContextFile, Rendered, Renderer, inputs_hash
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


def source_candidates(config: Config, target: Target) -> dict[str, tuple[Source, ...]]:
    """The upstream artifacts a target's build context needs, by name."""
    comp = COMPONENTS[target.component]
    out: dict[str, tuple[Source, ...]] = {}
    for name in comp.sources:
        if name == "slurm":
            out[name] = config.versions.slurm[target.coord(Axis.SLURM) or ""].sources
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
    """Build-context entries for a target's upstream sources (no Docker needed)."""

    def __init__(self, config: Config, cache: Cache, fetched: dict[str, str] | None = None) -> None:
        self.config = config
        self.cache = cache
        self.fetched = fetched or {}  # url → sha256 of what this run downloaded

    def _sha(self, source: Source) -> str:
        return self.fetched.get(source.url) or self.config.sha256_of(source)

    def __call__(self, target: Target) -> dict[str, ContextFile]:
        """Entries keyed by source name, named by the pinned (or locked, or fetched) sha256.

        The file need not be cached yet: its content is already defined by the checksum.
        """
        out = {}
        for name, candidates in source_candidates(self.config, target).items():
            source, sha = candidates[0], self._sha(candidates[0])
            for cand in candidates:
                cand_sha = self._sha(cand)
                if cand_sha != UNPINNED and self.cache.lookup(cand_sha, cand.filename):
                    source, sha = cand, cand_sha
                    break
            path = self.cache.root / sha / source.filename
            out[name] = ContextFile(source.filename, path, sha, 0o644)
        return out


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
        renderer: Renderer,
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
