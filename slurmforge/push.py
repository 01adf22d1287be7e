"""`invoke push`: publish built, tested images to an OCI registry and record their digests.

The Docker daemon does the transfer (it skips layers the registry already has, so a re-push of
unchanged images only checks blobs and re-puts manifests); credentials are the daemon client's
standard ones (docker config, credential helpers, `docker login`) and are never printed.
Transient failures (connection reset, EOF, timeouts, 5xx) are retried with exponential backoff a
bounded number of times. Every pushed tag lands in the lock file (image ref → digest), which the
Kubernetes target uses to pin images by digest. A tag whose cells were built for several arches
is a manifest list of them (manifest_list.py): the lock holds the list's digest under the tag and
each arch's image digest under <tag>-<arch>.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from docker_image import reference
from tqdm import tqdm

from slurmforge import manifest_list, matrix, refs, state
from slurmforge.engine import APIError, ConnectionFailed, Engine
from slurmforge.errors import ConfigError, SlurmforgeError
from slurmforge.matrix import BuildTarget, arch_suffix
from slurmforge.pins import NATIVE_ARCH

if TYPE_CHECKING:
    from slurmforge.app import Project

# Daemon messages (of the registry's answers) that a later attempt may not see again.
TRANSIENT = re.compile(
    r"connection reset|connection refused|broken pipe|\bEOF\b|timeout|timed out|"
    r"\b50[0-9]\b|internal server error|bad gateway|service unavailable|no such host",
    re.IGNORECASE,
)
AUTH = re.compile(
    r"unauthorized|authentication required|no basic auth credentials|access.*denied|\b401\b",
    re.IGNORECASE,
)


class PushError(SlurmforgeError):
    """The registry kept failing, or refused the push for a reason other than credentials."""


class _Transient(Exception):
    pass


@dataclass(frozen=True)
class Pushed:
    ref: str  # where it was pushed (registry/component:tag)
    digest: str  # sha256:… of the manifest
    sent: int  # bytes uploaded
    existed: int  # layers the registry already had
    attempts: int
    seconds: float


def registry_of(ref: str) -> str:
    """The registry host of an image reference (docker.io when it names none)."""
    return reference.Reference.parse_normalized_named(ref).domain()


def retarget(ref: str, old: str, new: str | None) -> str:
    """``ref`` moved from registry prefix ``old`` to ``new`` (unchanged without ``new``)."""
    if not new:
        return ref
    if not ref.startswith(old + "/"):
        raise ConfigError(f"{ref} is not under {old}; cannot move it to --registry {new}")
    return f"{new.rstrip('/')}/{ref[len(old) + 1 :]}"


def check_registry(value: str) -> str:
    try:
        return refs.registry_prefix(value.rstrip("/"))
    except ValueError as exc:
        raise ConfigError(
            f"--registry: {exc}", hint="e.g. 127.0.0.1:5000/slurmforge or ghcr.io/acme"
        ) from None


# -- preflight -----------------------------------------------------------------------------------


def preflight(project: Project, targets: list[BuildTarget], force: bool) -> dict[str, str]:
    """BuildTarget id → local image id, or the error that refuses the whole push before any byte."""
    engine, root = project.engine, project.root
    ids: dict[str, str] = {}
    missing = []
    for target in targets:
        info = engine.inspect(target.ref)
        if info is None:
            missing.append(target.ref)
        else:
            ids[target.id] = info.id
    if missing:
        raise ConfigError(
            f"not built: {', '.join(missing)}; nothing was pushed",
            hint=f"run: {project.hint('build')}",
        )
    untested = [t.ref for t in targets if not state.passed_tests(root, ids[t.id])]
    if untested and not force:
        raise ConfigError(
            f"the image tests have not passed for this build of {', '.join(untested)}; "
            "nothing was pushed",
            hint=f"run: {project.hint('test-images')}   (or push anyway with --force)",
        )
    return ids


# -- pushing -------------------------------------------------------------------------------------


class Pusher:
    def __init__(
        self,
        engine: Engine,
        retries: int = 4,
        backoff: float = 0.5,
        out: IO[str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.engine = engine
        self.retries = retries
        self.backoff = backoff
        self.out = out or sys.stderr
        self.sleep = sleep

    def push(self, image_id: str, refs: list[str], keep: tuple[str, ...] = ()) -> list[Pushed]:
        """Tag ``image_id`` as each of ``refs`` and push them; one progress bar for the image.

        Tags made only for the push (not in ``keep``) are removed again afterwards."""
        results = []
        with tqdm(
            desc=refs[0].rsplit("/", 1)[-1],
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=self.out,
            leave=True,
            disable=None,  # a bar on a terminal; CI logs get the summary lines only
        ) as bar:
            for ref in refs:
                self.engine.tag(image_id, ref)
                try:
                    results.append(self._with_retries(ref, bar))
                finally:
                    if ref not in keep:
                        self.engine.untag(ref)
        return results

    def _with_retries(self, ref: str, bar: tqdm) -> Pushed:
        start = time.monotonic()
        registry = registry_of(ref)
        for attempt in range(1, self.retries + 2):
            try:
                digest, sent, existed = self._once(ref, bar)
                return Pushed(ref, digest, sent, existed, attempt, time.monotonic() - start)
            except _Transient as exc:
                message = str(exc)
                if attempt > self.retries:
                    refused = manifest_list.unreachable(registry, message, attempt)
                    if refused is not None:
                        raise refused from None
                    raise PushError(f"pushing {ref} failed {attempt} times: {message}") from None
                delay = self.backoff * 2 ** (attempt - 1)
                bar.write(
                    f"push {ref}: {message}; retry {attempt}/{self.retries} in {delay:.1f} s",
                    file=self.out,
                )
                self.sleep(delay)
        raise AssertionError("unreachable")

    def _once(self, ref: str, bar: tqdm) -> tuple[str, int, int]:
        layers: dict[str, list[int]] = {}  # layer id → [sent, total]
        existed = 0
        digest = None
        base = bar.n
        try:
            for event in self.engine.push(ref):
                if "error" in event:
                    self._fail(ref, str(event.get("error")))
                status = event.get("status", "")
                layer = event.get("id", "")
                detail = event.get("progressDetail") or {}
                if status == "Pushing" and detail.get("total"):
                    layers[layer] = [int(detail.get("current", 0)), int(detail["total"])]
                elif status == "Pushed" and layer in layers:
                    layers[layer][0] = layers[layer][1]
                elif status == "Layer already exists":
                    existed += 1
                aux = event.get("aux") or {}
                if aux.get("Digest"):
                    digest = aux["Digest"]
                sent = sum(s for s, _ in layers.values())
                total = sum(t for _, t in layers.values())
                if total and (bar.total or 0) < base + total:
                    bar.total = base + total
                bar.update(base + sent - bar.n)
        except ConnectionFailed as exc:
            raise _Transient(f"the Docker daemon connection failed: {exc}") from None
        except APIError as exc:
            self._fail(ref, str(exc.explanation or exc))
        if digest is None:
            raise _Transient("the push ended without a digest")
        return digest, sum(s for s, _ in layers.values()), existed

    def _fail(self, ref: str, message: str) -> None:
        registry = registry_of(ref)
        if AUTH.search(message):
            has = self.engine.has_credentials(registry)
            why = (
                "the credentials for it in the docker config were rejected"
                if has
                else "the docker config has no credentials for it"
            )
            raise ConfigError(
                f"registry {registry} refused the push of {ref}: authentication failed ({why})",
                hint=f"run: docker login {registry}",
            )
        if TRANSIENT.search(message):
            raise _Transient(message)
        raise PushError(f"pushing {ref} failed: {message}")


def push(
    project: Project,
    registry: str | None = None,
    force: bool = False,
    retries: int = 4,
    out: IO[str] | None = None,
) -> tuple[list[Pushed], Path]:
    """Push every tag of the selected public images; the lock file is updated as images land."""
    if retries < 0:
        raise ConfigError(f"--retries {retries}: expected a count >= 0")
    new = check_registry(registry) if registry else None
    old = project.config.versions.sets[project.selection.set_name].registry
    targets = project.publishable()
    ids = preflight(project, targets, force)
    root = project.root
    pusher = Pusher(project.engine, retries=retries, out=out)
    done: list[Pushed] = []
    # the arches each published tag has in the whole set, whatever this push selected
    arches = {p: {t.arch for t in ts} for p, ts in by_published_tags(_whole_set(project)).items()}
    for published, members in by_published_tags(targets).items():
        tags = [retarget(t, old, new) for t in published]
        if arches.get(published, set()) <= {NATIVE_ARCH}:  # one arch: the image itself
            (target,) = members
            pushed = pusher.push(ids[target.id], tags, keep=target.tags)
            state.write_images_lock(root, {p.ref: p.digest for p in pushed})
            done += pushed
            continue
        digests = {}  # arch → its image's digest (every tag of one image has the same)
        for target in members:
            refs = [manifest_list.arch_tag(t, target.arch) for t in tags]
            pushed = pusher.push(ids[target.id], refs, keep=target.tags)
            state.write_images_lock(root, {p.ref: p.digest for p in pushed})
            done += pushed
            digests[target.arch] = pushed[0].digest
        if set(digests) != arches[published]:  # a push of one cell: its arch's tags alone
            lacking = ", ".join(sorted(arches[published] - set(digests)))
            note = f"push: {tags[0]}: no manifest list made: this push has no {lacking} image"
            print(f"{note} of it; a push of the whole set makes it", file=out or sys.stderr)
            continue
        done += _publish_lists(root, {tag: digests for tag in tags})
    return done, root / state.IMAGES_LOCK


def _whole_set(project: Project) -> list[BuildTarget]:
    """Every target of the selected set's cells, whatever cells the selection names."""
    name = project.selection.set_name
    return matrix.expand(project.config, name, matrix.cells_of(project.config, name))


def _publish_lists(root: Path, lists: dict[str, dict[str, str]]) -> list[Pushed]:
    """Each tag made the manifest list of its arches' images (arch → digest), recorded in the
    lock as it lands."""
    done = []
    for tag, members in lists.items():
        start = time.monotonic()
        digest = manifest_list.publish(tag, members)
        state.write_images_lock(root, {tag: digest})
        done.append(Pushed(tag, digest, 0, len(members), 1, time.monotonic() - start))
    return done


def push_lists(
    project: Project, registry: str | None = None, out: IO[str] | None = None
) -> tuple[list[Pushed], Path]:
    """The manifest lists of the set's multi-arch tags, made from what pushes of each cell left in
    the registry (``<tag>-<arch>``, read back by digest and checked to be that arch's): what CI
    runs after a job per cell, on a machine that built nothing. Every arch's image is found
    first; one that is missing is refused before any list is made."""
    new = check_registry(registry) if registry else None
    name = project.selection.set_name
    old = project.config.versions.sets[name].registry
    named = project.selection.components
    whole = [
        t
        for t in _whole_set(project)
        if matrix.COMPONENTS[t.component].public and (not named or t.component in named)
    ]
    wanted: dict[str, dict[str, str | None]] = {}  # tag → arch → digest
    for published, members in by_published_tags(whole).items():
        if len(members) < 2:
            continue
        for tag in (retarget(t, old, new) for t in published):
            wanted[tag] = {
                t.arch: manifest_list.image_digest(manifest_list.arch_tag(tag, t.arch), t.arch)
                for t in members
            }
    if not wanted:
        raise ConfigError(f"set {name!r}: no tag of it has more than one arch: no list to make")
    missing = [
        manifest_list.arch_tag(tag, arch)
        for tag, digests in wanted.items()
        for arch, digest in digests.items()
        if digest is None
    ]
    if missing:
        raise PushError(
            f"{missing[0]} is not in the registry ({len(missing)} per-arch tags missing): "
            "no list made",
            hint=f"push each cell first: {project.hint('push')} --cell CELL",
        )
    lists = {tag: {arch: str(d) for arch, d in digests.items()} for tag, digests in wanted.items()}
    done = _publish_lists(project.root, lists)
    for tag, members in lists.items():
        print(f"push: {tag}: list of {', '.join(sorted(members))}", file=out or sys.stderr)
    return done, project.root / state.IMAGES_LOCK


def by_published_tags(targets: list[BuildTarget]) -> dict[tuple[str, ...], list[BuildTarget]]:
    """The tags a push publishes → the images (one per arch) that share them."""
    groups: dict[tuple[str, ...], list[BuildTarget]] = {}
    for target in targets:
        suffix = arch_suffix(target.arch)
        published = tuple(t.removesuffix(suffix) if suffix else t for t in target.tags)
        groups.setdefault(published, []).append(target)
    return groups


def summary(pushed: list[Pushed]) -> list[list[Any]]:
    return [
        [
            p.ref,
            p.digest[:19] + "…",
            f"{p.sent / 1e6:.1f} MB",
            p.existed,
            p.attempts,
            f"{p.seconds:.1f}s",
        ]
        for p in pushed
    ]
