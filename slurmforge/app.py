"""What each task does, as functions over a loaded project; tasks.py only parses and prints.

Everything that can reject the input (config, selection, daemon, checksums) runs before the first
image is built, so bad input never leaves a half-built or half-tagged set behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from slurmforge import buildlog, fastpath, matrix, options, version, versions
from slurmforge.bootstrap import Base
from slurmforge.build import BuildOptions, BuildRunner, Result
from slurmforge.config import Config
from slurmforge.context import ContextSources, bootstrap_of, parent_refs
from slurmforge.engine import Engine
from slurmforge.errors import ConfigError
from slurmforge.fetching import Fetching
from slurmforge.matrix import BuildTarget
from slurmforge.options import FetchOptions
from slurmforge.plan import Action, Decision, Planner, decide
from slurmforge.proc import git_origin, git_revision
from slurmforge.render import ContextFiles, DockerfileRenderer, Rendered
from slurmforge.sources import Cache


@dataclass(frozen=True)
class Selection:
    config_path: Path = Path("versions.yaml")
    set_name: str = "default"
    cells: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    root: Path = Path(".")  # the checkout: where tests/ are


class Project(Fetching):
    """The selected cells of one matrix set and their build targets: what the build-side
    tasks ask (fetching their sources: fetching.py)."""

    def __init__(self, selection: Selection) -> None:
        self.selection = selection
        self.config: Config = versions.load(selection.config_path)
        self.root = self.config.root
        all_cells = matrix.cells_of(self.config, selection.set_name)
        self.cells = matrix.select_cells(all_cells, selection.cells, selection.set_name)
        self.targets = matrix.expand(
            self.config, selection.set_name, self.cells, selection.components
        )
        self.by_id = {t.id: t for t in self.targets}
        self.cache = Cache(self.root / ".cache" / "sources")
        self.renderer = DockerfileRenderer(self.config)
        self.fetched: dict[str, str] = {}  # artifact key → sha256 of what this run downloaded
        self._contexts: dict[str, ContextFiles] = {}
        self._sources = ContextSources(self.config, self.cache, self.fetched)

    @cached_property
    def engine(self) -> Engine:
        return Engine.connect()

    def context(self, target: BuildTarget) -> ContextFiles:
        """``target``'s upstream build-context entries, and the optional features it lacks."""
        if target.id not in self._contexts:
            self._contexts[target.id] = self._sources(target)
        return self._contexts[target.id]

    def rendered(self, target: BuildTarget) -> Rendered | Base:
        """What ``target`` is built from: its Dockerfile and context, or a base's bootstrap spec.

        The one entry to rendering: parents, sources and the features a parent went without
        (a slurmd whose slurm-debs skipped pyxis does not carry it) all come from the project.
        """
        spec = bootstrap_of(self.config, target)
        if spec is not None:
            return spec
        lacking: set[str] = set()
        todo = list(target.parents)
        while todo:
            parent = self.by_id[todo.pop()]
            todo += parent.parents
            if bootstrap_of(self.config, parent) is None:
                lacking.update(self.context(parent).skipped)
        refs = parent_refs(target, self.by_id)
        return self.renderer.render(target, refs, self.context(target), tuple(sorted(lacking)))

    def planner(self) -> Planner:
        return Planner(self.engine, self.rendered)

    # -- plan / build ----------------------------------------------------------------------

    def plan(self) -> list[Decision]:
        return decide(self.targets, self.engine, self.rendered)

    def only_tags(self, fetch: FetchOptions) -> bool:
        """Whether building the selection would only tag images that exist (under this tag or
        another) and fetch nothing: then it takes no turn under the build lock."""
        if self.optional_missing():
            return False
        self.fetch_optional(fetch)  # nothing to fetch: what the Dockerfiles say, as build() has it
        return all(d.action is Action.CACHED for d in self.plan())

    @property
    def stamp_key(self) -> list[str]:
        s = self.selection
        return fastpath.selection_key(s.set_name, s.cells, s.components)

    @property
    def jail_ref(self) -> str:
        """The jail image of the selected cell (one cell: --cell picks it when the set has
        several)."""
        targets = [t for t in self.targets if t.component == "jail"]
        if len(targets) != 1:
            cells = ", ".join(c.name for c in self.cells)
            raise ConfigError(
                f"set {self.selection.set_name!r} has several cells ({cells}); pick one with --cell"
            )
        return targets[0].ref

    def run_tests(self, tier: str) -> int:
        """pytest on tests/<tier> (image or cluster) with this selection passed to the test
        harness; its exit code. The cluster tier runs one cell's images at a time."""
        s = self.selection
        if tier == "cluster" and len(s.cells) > 1:
            raise ConfigError("--cell: the cluster tests run on one cell at a time; give one")
        env = {
            "SLURMFORGE_TEST_SET": s.set_name,
            "SLURMFORGE_TEST_CELLS": ",".join(s.cells),
            "SLURMFORGE_TEST_CONFIG": str(s.config_path),
        }
        tests = s.root / "tests" / tier
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tests)]
        return subprocess.call(argv, cwd=s.root, env={**os.environ, **env})

    def build(
        self, fetch: FetchOptions, jobs: int, fail_fast: bool
    ) -> tuple[list[Result], dict[str, str]]:
        """Results per target, and the optional features skipped (feature → why)."""
        engine = self.engine  # fail on an unreachable daemon before any download
        # Optional features first: whether they can be had decides what the Dockerfiles say.
        fetched, skipped = self.fetch_optional(fetch)
        # Required sources are fetched (and verified) before anything is built, but only for
        # targets that may need building: a cached slurm-debs does not need its tarball.
        decisions = {d.target.id: d for d in self.plan()}
        todo = [d.target for d in decisions.values() if d.action is Action.BUILD]
        fetched += self.fetch(fetch, todo)
        options = BuildOptions(
            jobs=max(1, jobs),
            fail_fast=fail_fast,
            log_root=buildlog.root(self.root),
            tmp_root=self.root / ".cache" / "tmp",
            oci=self.oci_labels(),
        )
        runner = BuildRunner(self.planner(), engine, options, known=decisions)
        results = runner.run(self.targets)
        if all(r.ok for r in results) and not fetch.allow_unpinned:
            images = {tag: r.image_id for r in results for tag in r.target.tags}
            site = self.renderer.site
            fastpath.record(
                self.config.path,
                self.stamp_key,
                images,
                [r.row() for r in results],
                [site.dir] if site else [],
            )
        return results, skipped

    def publishable(self) -> list[BuildTarget]:
        """The selected public images (named components only, when components were given)."""
        named = self.selection.components
        return [
            t
            for t in self.targets
            if matrix.COMPONENTS[t.component].public and (not named or t.component in named)
        ]

    def hint(self, task: str = "build") -> str:
        """The `invoke <task>` command line for this selection."""
        s = self.selection
        words = ["invoke", task, "--set", s.set_name]
        words += [w for c in s.cells for w in ("--cell", c)]
        words += [w for c in s.components for w in ("--component", c)]
        return " ".join(words)

    def oci_labels(self) -> dict[str, str]:
        epoch = options.number(
            "$SOURCE_DATE_EPOCH", os.environ.get("SOURCE_DATE_EPOCH") or None, integer=True,
            inclusive=True,
        )  # fmt: skip
        created = datetime.fromtimestamp(epoch, UTC) if epoch is not None else datetime.now(UTC)
        return {
            "org.opencontainers.image.created": created.isoformat(timespec="seconds"),
            "org.opencontainers.image.revision": git_revision(self.root),
            "org.opencontainers.image.source": git_origin(self.root),
            "io.slurmforge.version": version.describe(self.root),
        }

    # -- render / clean --------------------------------------------------------------------

    def render(self, out: Path) -> list[Path]:
        """Write every target's rendered Dockerfile (or bootstrap command) under ``out``."""
        from slurmforge import bootstrap

        written = []
        for target in self.targets:
            dest = out / target.component / target.id.split("/", 1)[1]
            dest.mkdir(parents=True, exist_ok=True)
            recipe = self.rendered(target)
            if isinstance(recipe, Rendered):
                path = dest / "Dockerfile"
                path.write_text(recipe.dockerfile)
            else:
                path = dest / "mmdebstrap.cmd"
                path.write_text(" ".join(bootstrap.command(recipe, Path("rootfs.tar"))) + "\n")
            written.append(path)
        return written

    def clean(self, images: bool, sources: bool) -> list[str]:
        removed = []
        for sub in ("logs", "tmp"):
            path = self.root / ".cache" / sub
            if path.exists():
                shutil.rmtree(path)
                removed.append(str(path))
        if sources and self.cache.root.exists():
            shutil.rmtree(self.cache.root)
            removed.append(str(self.cache.root))
        if images:
            for target in reversed(self.targets):
                removed += [ref for ref in target.tags if self.engine.remove(ref)]
        return removed


def matrix_rows(project: Project) -> list[dict[str, str]]:
    mset = project.config.versions.sets[project.selection.set_name]
    rows = []
    for cell in project.cells:
        row = {"cell": cell.name, "distro": cell.distro, "slurm": cell.slurm, "cuda": cell.cuda,
               "arch": cell.arch}  # fmt: skip
        for component, comp in matrix.COMPONENTS.items():
            if comp.public:
                row[component] = matrix.tags_for(mset, component, cell)[0]
        rows.append(row)
    return rows
