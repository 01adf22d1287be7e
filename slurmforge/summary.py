"""A build's summary as `invoke build` prints it (tasks.py, and the launcher's no-op answer,
launch.py), and the plain tables other tasks print. Standard library only."""

from __future__ import annotations

import sys
from typing import Any

SKIPPED_HINT = (
    "hint: optional features were skipped (see 'without …' above; the images carry the label "
    "io.slurmforge.skipped). Supply their sources with --mirror DIR (laid out as "
    "DIR/<host>/<path>), or where GitHub is reachable run `invoke lock --trust "
    "https://github.com/NVIDIA/` and build again."
)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)).rstrip() for r in lines
    )


def _size(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n else "-"


def _note(row: dict[str, Any]) -> str:
    lack = f"without {', '.join(row['lacking'])}" if row.get("lacking") else ""
    return "; ".join(part for part in (row["note"], lack) if part)


def print_summary(rows: list[dict[str, Any]]) -> None:
    """One row per target: its status, time, size and why (and the hint when a feature was
    skipped)."""
    cells = [
        [r["target"], r["status"], f"{r['seconds']:.1f}s", _size(r["size"]), _note(r)] for r in rows
    ]
    print(table(cells, ["target", "status", "time", "size", "note"]))
    if any(r.get("lacking") for r in rows):
        print(SKIPPED_HINT, file=sys.stderr)
