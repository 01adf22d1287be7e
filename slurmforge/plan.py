"""Decide, per target, whether to build or reuse, and say why (which input changed).

What a target is built from (its rendered Dockerfile and context, or a bootstrap spec) comes
from the project (``Project.rendered``); this module only compares it with the image the engine
has under the target's reference.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from slurmforge import bootstrap
from slurmforge.bootstrap import Base
from slurmforge.engine import HASH_LABEL, MANIFEST_LABEL, Engine, ImageInfo
from slurmforge.matrix import BuildTarget
from slurmforge.pins import UNPINNED
from slurmforge.render import Rendered, inputs_hash

UNCHANGED = "inputs unchanged"  # the reason of a target whose image is the one it would build


class Action(StrEnum):
    BUILD = "build"
    CACHED = "cached"


@dataclass(frozen=True)
class Decision:
    target: BuildTarget
    action: Action
    reason: str
    inputs_hash: str | None  # None while a parent is still to be built
    manifest: dict[str, Any] | None
    # a Dockerfile and its context, or a bootstrapped base's spec; None while a parent is still
    # to be built (the build renders it once that parent is, with the parent's ID)
    recipe: Rendered | Base | None
    existing: ImageInfo | None

    @property
    def rendered(self) -> Rendered | None:
        return self.recipe if isinstance(self.recipe, Rendered) else None

    @property
    def lacking(self) -> tuple[str, ...]:
        """The optional features the image goes without."""
        return self.rendered.lacking if self.rendered else ()

    def labels(self) -> dict[str, str]:
        assert self.inputs_hash is not None and self.manifest is not None
        return {
            HASH_LABEL: self.inputs_hash,
            MANIFEST_LABEL: json.dumps(self.manifest, sort_keys=True, separators=(",", ":")),
        }


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


class Planner:
    def __init__(
        self,
        engine: Engine,
        recipe: Callable[[BuildTarget], Rendered | Base],
        images: dict[str, ImageInfo] | None = None,
    ) -> None:
        self.engine = engine
        self.recipe = recipe  # Project.rendered
        # the images as they are now, by tag (a plan that changes nothing reads them once);
        # None: ask the engine each time (a build, whose images change as it goes)
        self.images = images

    def evaluate(self, target: BuildTarget, parents: dict[str, Decision | str]) -> Decision:
        """``parents``: parent target id → its image ID, or its (pending) decision."""
        if self.images is None:
            existing = self.engine.inspect(target.ref)
        else:
            existing = self.images.get(target.ref)
        pending = [pid for pid, p in parents.items() if isinstance(p, Decision)]
        if pending:  # the hash cannot be known yet, nor need it be rendered
            why = f"parent {pending[0]} will be rebuilt"
            return Decision(target, Action.BUILD, why, None, None, None, existing)
        recipe = self.recipe(target)
        if isinstance(recipe, Rendered):
            ids = {pid: p for pid, p in parents.items() if isinstance(p, str)}
            manifest = recipe.manifest(ids)
            unpinned = any(f.sha256 == UNPINNED for f in recipe.files)
        else:
            manifest, unpinned = bootstrap.manifest(recipe), False
        if unpinned:  # the hash cannot be known yet
            why = "source not pinned yet"
            return Decision(target, Action.BUILD, why, None, None, recipe, existing)
        digest = inputs_hash(manifest)
        if existing is None:
            reason, action = "no image yet", Action.BUILD
        elif existing.inputs_hash == digest:
            reason, action = UNCHANGED, Action.CACHED
        elif existing.inputs_hash is None:
            reason, action = "existing image has no inputs label", Action.BUILD
        else:
            changed = changes(existing.manifest, manifest) or ["inputs"]
            reason, action = "changed: " + ", ".join(changed), Action.BUILD
        if action is Action.BUILD and (twin := self._twin(target, digest)) is not None:
            (ref, existing), action = twin, Action.CACHED
            reason = f"same inputs as {ref}"
        return Decision(target, action, reason, digest, manifest, recipe, existing)

    def _twin(self, target: BuildTarget, digest: str) -> tuple[str, ImageInfo] | None:
        """An image made from the same inputs under another reference, whose labels this
        target's build would give it too (its version and title): the same cell in two sets,
        which differ in their registry alone. Tagging it gives what a build would, but for the
        time and commit of the labels the first build wrote (as a cached image keeps its own).
        Asked only of a target about to be built: one listing of the engine's images."""
        images = self.images if self.images is not None else self.engine.tagged()
        version = target.ref.rpartition(":")[2]
        for ref, info in sorted(images.items()):
            if (
                info.inputs_hash == digest
                and info.labels.get("org.opencontainers.image.version") == version
                and info.labels.get("org.opencontainers.image.title") == target.component
            ):
                return ref, info
        return None


def decide(
    targets: list[BuildTarget],
    engine: Engine,
    rendered: Callable[[BuildTarget], Rendered | Base],
) -> list[Decision]:
    """What a build of ``targets`` (in dependency order) would do with each, from the images
    the engine holds now (one listing). While the daemon lists them (its own work, most of the
    wait) the targets are rendered here in order; the rest once a decision needs them (one
    whose parent is to be rebuilt needs none). Each is rendered once."""
    recipes: dict[str, Rendered | Base] = {}
    with ThreadPoolExecutor(1) as pool:
        listing = pool.submit(engine.tagged)
        for target in targets:
            if listing.done():
                break
            recipes[target.id] = rendered(target)
        images = listing.result()

    def recipe(target: BuildTarget) -> Rendered | Base:
        if target.id not in recipes:
            recipes[target.id] = rendered(target)
        return recipes[target.id]

    planner = Planner(engine, recipe, images)
    decisions: dict[str, Decision] = {}
    for target in targets:
        parents: dict[str, Decision | str] = {}
        for pid in target.parents:
            d = decisions[pid]
            parents[pid] = d.existing.id if d.action is Action.CACHED and d.existing else d
        decisions[target.id] = planner.evaluate(target, parents)
    return [decisions[t.id] for t in targets]
