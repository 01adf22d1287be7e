"""Fetching a project's upstream sources into the content-addressed cache: the required ones
(or an error), the optional features' (or why each was skipped), and recording the sha256 of
unpinned ones fetched from a trusted origin (versions.lock)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from slurmforge import state
from slurmforge.config import Config
from slurmforge.context import ContextSources, Need, needs
from slurmforge.errors import ConfigError, SourceError
from slurmforge.matrix import BuildTarget
from slurmforge.options import FetchOptions
from slurmforge.pins import UNPINNED
from slurmforge.sources import Cache, Fetched, resolve_mirror


class Fetching:
    """The sources part of app.Project."""

    config: Config
    targets: list[BuildTarget]
    cache: Cache
    fetched: dict[str, str]  # artifact key → sha256 of what this run downloaded
    _contexts: dict

    def remember(self, fetched: Iterable[Fetched]) -> None:
        """Downloads of this run name their artifacts from now on (unpinned ones included)."""
        self.fetched.update({f.source.key: f.sha256 for f in fetched})
        self._contexts.clear()

    # -- sources ---------------------------------------------------------------------------

    def fetch(
        self, options: FetchOptions, targets: Iterable[BuildTarget] | None = None
    ) -> list[Fetched]:
        """Required sources, fetched and verified, or an error (optional ones: fetch_optional)."""
        mirror = resolve_mirror(options.mirror)
        wanted: dict[tuple[str, ...], Need] = {}
        for target in self.targets if targets is None else targets:
            for need in needs(self.config, target):
                if not need.optional:
                    wanted[tuple(s.key for s in need.candidates)] = need
        fetched = [self._fetch(need, options, mirror) for need in wanted.values()]
        self.remember(fetched)
        return fetched

    def _fetch(self, need: Need, options: FetchOptions, mirror: str | None) -> Fetched:
        return self.cache.fetch(
            self.config,
            need.candidates,
            mirror=mirror,
            allow_unpinned=options.allow_unpinned,
            trusted=options.trusted,
        )

    def fetch_optional(self, options: FetchOptions) -> tuple[list[Fetched], dict[str, str]]:
        """Optional features' sources: what could be had, and why each other one was skipped.

        One that is unpinned is not even tried (unless allowed or trusted); one that is pinned but
        unreachable is tried once per run. Neither fails the build: the images say they lack it.
        """
        mirror = resolve_mirror(options.mirror)
        fetched: list[Fetched] = []
        skipped: dict[str, str] = {}
        for need in self.optional_missing():
            if need.feature in skipped:
                continue
            try:
                fetched.append(self._fetch(need, options, mirror))
            except ConfigError:  # refused: unpinned, neither allowed nor trusted
                url = need.candidates[0].url
                skipped[need.feature] = f"its sha256 is '{UNPINNED}' ({url}), so not fetched"
            except SourceError as exc:
                skipped[need.feature] = f"could not be fetched: {exc.message}"
        self.remember(fetched)
        return fetched, skipped

    def optional_missing(self) -> list[Need]:
        """The optional features' sources the cache lacks, each source once."""
        sources = ContextSources(self.config, self.cache, self.fetched)
        seen: set[tuple[str, ...]] = set()
        missing = []
        for target in self.targets:
            for need in needs(self.config, target):
                key = tuple(s.key for s in need.candidates)
                if need.optional and key not in seen:
                    seen.add(key)
                    if not sources.cached(need):
                        missing.append(need)
        return missing

    def lock(self, options: FetchOptions) -> tuple[list[Fetched], dict[str, str], Path]:
        if not options.trusted:
            raise ConfigError(
                "lock needs at least one --trust ORIGIN (e.g. https://download.schedmd.com/)"
            )
        optional, skipped = self.fetch_optional(options)
        fetched = self.fetch(options) + optional
        recorded = {
            f.source.url: f.sha256
            for f in fetched
            if self.config.sha256_of(f.source) == UNPINNED
            and f.source.url.startswith(options.trusted)
        }
        return fetched, skipped, state.write_sources_lock(self.config.path, recorded)
