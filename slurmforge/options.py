"""Command-line options: typed values, and how invoke reads a command line (errors, `--help`).

Every numeric option reaches the tasks as text and is read by `number`, so that a bad value gets
the same one-line error (naming the option) and exit status 2 as any other bad input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
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
        try:
            if not each.exists():
                continue
        except OSError as exc:  # a name too long, a parent that is not searchable
            raise ConfigError(f"{label}: {exc.strerror}") from None
        if not each.is_dir():
            raise ConfigError(f"{label}: {each} is not a directory")
        break
    return path


HELP = ("-h", "--help")


def help_asked(args: list[str], tasks: Collection[str]) -> str | None:
    """The task whose help a command line's tasks and options (``args``) ask for: the last
    task named before a `-h`/`--help`. invoke's parser alone takes that token as the value of
    a positional argument still missing: `invoke render --help` wrote Dockerfiles under
    ./--help, and `invoke scale --help` refused '--help' as a node count."""
    for i, arg in enumerate(args):
        if arg in HELP:
            named = [a for a in args[:i] if a in tasks]
            return named[-1] if named else None
    return None


def parse_tasks_our_way() -> None:
    """Make invoke's parse errors (an unknown task or option, a missing value) an ``error:`` line
    and exit status 2, like all other bad input, instead of its plain message and status 1; and
    a `--help` after a task's name that task's help (`help_asked`), whatever it follows.

    invoke has no hook for this; its Program calls parse_tasks after loading tasks.py, so the
    method is wrapped once from there."""
    from invoke import Exit
    from invoke.exceptions import ParseError
    from invoke.program import Program

    parse = Program.parse_tasks
    if getattr(parse, "slurmforge", False):
        return

    def parse_tasks(self: Program) -> None:
        assert self.collection is not None  # loaded before the tasks are parsed
        name = help_asked(self.core.unparsed, self.collection.task_names)
        if name:
            self.core.unparsed = []  # nothing of the line but the help is read
        try:
            parse(self)
        except ParseError as exc:
            raise Exit(f"error: {exc}\nhint: invoke --list; invoke --help TASK", code=2) from None
        if name:
            self.args.help.value = name  # what `invoke --help TASK` sets: parse_cleanup prints it

    parse_tasks.slurmforge = True  # type: ignore[attr-defined]
    Program.parse_tasks = parse_tasks  # type: ignore[method-assign]
