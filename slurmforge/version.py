"""slurmforge's version as a run reports it: the release (``__version__``) and, in a checkout, the
commit after a ``+`` (semver's build metadata: ``0.9.0+git.1a2b3c4d5e6f``, ``.dirty`` when the
tree has changes). Images carry it as ``io.slurmforge.version``, backups in their manifest."""

from __future__ import annotations

from pathlib import Path

from slurmforge import __version__
from slurmforge.proc import git_revision

CHECKOUT = Path(__file__).resolve().parent.parent


def describe(root: Path = CHECKOUT) -> str:
    if not (root / ".git").exists():
        return __version__
    revision = git_revision(root)
    if revision == "unknown":
        return __version__
    commit, dirty = revision.removesuffix("-dirty"), revision.endswith("-dirty")
    return f"{__version__}+git.{commit[:12]}{'.dirty' if dirty else ''}"
