"""Command-line options: typed values and the exit status of a command line invoke cannot parse.

Every numeric option reaches the tasks as text and is read by `number`, so that a bad value gets
the same one-line error (naming the option) and exit status 2 as any other bad input.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmforge.errors import ConfigError, quote


@dataclass(frozen=True)
class FetchOptions:
    """How sources are fetched: from a mirror, unpinned ones accepted, origins trusted to lock."""

    mirror: str | None = None
    allow_unpinned: bool = False
    trusted: tuple[str, ...] = field(default=())


def number(
    option: str,
    value: Any,
    default: float | None = None,
    *,
    integer: bool = False,
    minimum: float = 0,
    inclusive: bool = False,
) -> Any:
    """``--option``'s value as a finite number above ``minimum`` (or at it, when
    ``inclusive``); an integer with ``integer``; ``default`` when the option was not given."""
    if value is None:
        return default
    text = str(value).strip()
    kind = "an integer" if integer else "a number"
    bound = f"{'>=' if inclusive else '>'} {minimum:g}"
    try:
        if integer and not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValueError(text)
        parsed = int(text) if integer else float(text)
    except ValueError:
        parsed = None
    if (
        parsed is None
        or not math.isfinite(parsed)
        or not (parsed >= minimum if inclusive else parsed > minimum)
    ):
        raise ConfigError(f"{option} {quote(value)}: expected {kind} {bound}")
    return parsed


def out_dir(option: str, value: str | None, default: Path) -> Path:
    """``--option`` as a directory to write under: resolved, and refused when it (or what would
    have to be its parent) is something other than a directory."""
    path = Path(value).expanduser().resolve() if value else default
    return directory(f"{option} {quote(value or str(path))}", path)


def directory(label: str, path: Path) -> Path:
    """``path``, refused (naming it by ``label``) when it, or the nearest of its parents that
    exists, is not a directory: something would have to be written where a file is."""
    for each in (path, *path.parents):
        if each.exists():
            if not each.is_dir():
                raise ConfigError(f"{label}: {each} is not a directory")
            break
    return path


def parse_errors_exit_2() -> None:
    """Make invoke's parse errors (an unknown task or option, a missing value) an ``error:`` line
    and exit status 2, like all other bad input, instead of its plain message and status 1.

    invoke has no hook for this; its Program calls parse_tasks after loading tasks.py, so the
    method is wrapped once from there."""
    from invoke import Exit
    from invoke.exceptions import ParseError
    from invoke.program import Program

    parse = Program.parse_tasks
    if getattr(parse, "slurmforge", False):
        return

    def parse_tasks(self: Program) -> None:
        try:
            parse(self)
        except ParseError as exc:
            raise Exit(f"error: {exc}\nhint: invoke --list; invoke --help TASK", code=2) from None

    parse_tasks.slurmforge = True  # type: ignore[attr-defined]
    Program.parse_tasks = parse_tasks  # type: ignore[method-assign]
