"""`invoke build`'s entry, for every caller (the CLI, tests, benchmarks): the no-op fast path
(fastpath.py); a build that only tags images that exist (another checkout's, another set's),
which takes no turn; else the full build under the build lock, after the fast path is checked
again there (a build this one waited for may have built the same targets). Importing it loads
nothing heavy: pydantic, jinja2 and the Docker SDK come in only when something is to be
built."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmforge import buildlock, fastpath
from slurmforge.errors import BuildError
from slurmforge.options import FetchOptions

if TYPE_CHECKING:
    from slurmforge.cli import Select


@dataclass(frozen=True)
class Outcome:
    """A build's summary rows (one per target), the optional features it skipped (feature →
    why) and how many targets failed."""

    rows: list[dict[str, Any]]
    skipped: dict[str, str] = field(default_factory=dict)
    failed: int = 0
    logs: Path | None = None

    def check(self) -> None:
        """Raise BuildError when a target did not build."""
        if self.failed:
            raise BuildError(
                f"{self.failed} of {len(self.rows)} targets did not build",
                hint=f"logs in {self.logs}",
            )


def _unchanged(select: Select, fetch: FetchOptions) -> Outcome | None:
    """The summary of the last build of this selection when nothing changed since; else None."""
    if fetch.allow_unpinned:
        return None
    rows = fastpath.check(select.config, select.set, select.cells, select.components)
    return None if rows is None else Outcome(rows)


def build(select: Select, fetch: FetchOptions, jobs: int, fail_fast: bool) -> Outcome:
    """Build the selection (``jobs`` targets at once; ``fail_fast``: stop at the first
    failure), or answer from the fast path when nothing changed."""
    done = _unchanged(select, fetch)
    if done is not None:
        return done
    # before the lock, what needs no build to say: a bad --cell or --component, or no Docker
    # daemon, is refused at once, not after another build of this checkout is done
    project = select.project()
    project.engine  # noqa: B018 (connects, or raises EngineUnavailable)
    if project.only_tags(fetch):  # every image there already: tagging waits for no one
        results, skipped = project.build(fetch, jobs, fail_fast)
    else:
        with buildlock.held(select.root):
            done = _unchanged(select, fetch)  # a build this one waited for may have built them
            if done is not None:
                return done
            results, skipped = project.build(fetch, jobs, fail_fast)
    rows = [r.row() for r in results]
    failed = sum(not r.ok for r in results)
    return Outcome(rows, skipped, failed, select.root / ".cache/logs/latest")
