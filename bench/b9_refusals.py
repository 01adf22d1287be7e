"""B9: how fast bad input is refused, and how much of it the property test tries.

- The property test's generators (tests/unit/documents.py) drawn N times per file kind
  (SLURMFORGE_FUZZ_EXAMPLES, default 300), each input run through the command line in-process:
  distinct inputs tried, how many were refused (exit 2), the slowest answer, and any answer that
  was neither 0 nor 2 or printed a traceback (there must be none).
- Refusing a 20 MB versions.yaml against refusing a 1 KB one with a schema error (the baseline),
  both through a fresh `invoke` process, best of 3.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from bench.common import ROOT
from tests.unit import documents
from tests.unit.helpers import INVOKE
from tests.unit.inproc import run_cli

EXAMPLES = int(os.environ.get("SLURMFORGE_FUZZ_EXAMPLES", "300"))


@dataclass
class Stats:
    seen: set[str] = field(default_factory=set)
    refused: int = 0
    accepted: int = 0
    slowest: tuple[float, str] = (0.0, "")
    bad: list[str] = field(default_factory=list)


def run_kind(tmp: Path, name: str, shipped: dict, command: list[str], stats: Stats) -> None:
    """EXAMPLES inputs of one file kind, drawn as the property test draws them."""

    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(text=documents.documents(shipped))
    def one(text: str) -> None:
        stats.seen.add(hashlib.sha256(f"{name}\0{text}".encode(errors="surrogatepass")).hexdigest())
        path = tmp / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        args = [*command, str(path)]
        if name == "cluster.yaml":
            args = [*command, "--cluster", str(path), "--out", str(tmp / "out")]
        start = time.monotonic()
        proc = run_cli(*args)
        seconds = time.monotonic() - start
        if seconds > stats.slowest[0]:
            first = proc.stderr.splitlines()[0][:100] if proc.stderr else "accepted"
            stats.slowest = (seconds, f"{name}: {first}")
        if proc.returncode not in (0, 2) or "Traceback" in proc.stderr:
            stats.bad.append(proc.stderr[-300:])
        elif proc.returncode == 2:
            stats.refused += 1
        else:
            stats.accepted += 1

    one()


def property_figures(tmp: Path) -> None:
    (tmp / "layers").symlink_to(ROOT / "deploy" / "layers")
    stats = Stats()
    run_kind(tmp, "versions.yaml", documents.SHIPPED_VERSIONS, ["matrix", "--config"], stats)
    k8s = ["deploy", "--target", "k8s", "--dry-run"]
    run_kind(tmp, "cluster.yaml", documents.SHIPPED_CLUSTER, k8s, stats)
    print(
        f"property test: {len(stats.seen)} distinct inputs ({stats.refused} refused, "
        f"{stats.accepted} accepted), slowest answer {stats.slowest[0] * 1000:.0f} ms "
        f"({stats.slowest[1]}), {len(stats.bad)} with another exit status or a traceback"
    )
    for text in stats.bad[:3]:
        print("  ", text.replace("\n", " | "))


def refusal_seconds(path: Path) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        proc = subprocess.run(
            [*INVOKE, "matrix", "--config", str(path)], capture_output=True, text=True
        )
        best = min(best, time.perf_counter() - start)
        assert proc.returncode == 2, proc.stderr
    return best


def size_figures(tmp: Path) -> None:
    small = tmp / "small.yaml"
    small.write_text("sets: 1\n" + "# padding\n" * 100)
    huge = tmp / "huge.yaml"
    huge.write_text("x: " + "a" * (20 << 20) + "\n")
    base, big = refusal_seconds(small), refusal_seconds(huge)
    print(
        f"refusing a 20 MB file: {big * 1000:.0f} ms; a 1 KB bad file: {base * 1000:.0f} ms "
        f"(ratio {big / base:.2f})"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        property_figures(Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        size_figures(Path(tmp))


if __name__ == "__main__":
    main()
