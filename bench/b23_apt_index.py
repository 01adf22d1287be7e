"""B23: one `apt-get update` in a bootstrapped base, with the base's index options vs Debian's
apt defaults, in the same run.

Every install layer of every image runs `apt-get update` (no layer keeps the lists), and on a
base of another arch it runs under qemu-user. The base's options (slurmforge/bootstrap.py) leave
out the translations and take the gzip indexes before the xz ones; the baseline reads none of
the base's apt configuration (APT_CONFIG names a file that points apt at an empty parts
directory), which is Debian's default. The figure is the CPU time (user + system) of the update
and its download and decompression helpers, median of RUNS, for each base that is built here
(`invoke build` makes the amd64 one; the grace set's arm64 cell the arm64 one).
"""

from __future__ import annotations

import statistics
import subprocess

RUNS = 3
BASES = ("slurmforge/base:debian12", "slurmforge/base:debian12-arm64")

# One container per base: each run starts from empty lists and reports its children's CPU time.
_SCRIPT = r"""
set -e
mkdir -p /tmp/no-parts && echo 'Dir::Etc::Parts "/tmp/no-parts";' > /tmp/defaults.conf
for i in $(seq "$1"); do
  for kind in base defaults; do
    rm -rf /var/lib/apt/lists/*
    if [ $kind = base ]; then env=; else env=APT_CONFIG=/tmp/defaults.conf; fi
    times > /tmp/before  # in this shell: a $(times) would report its subshell's children
    env $env apt-get update -qq > /dev/null
    times > /tmp/after
    echo "$kind $(tail -1 /tmp/before) | $(tail -1 /tmp/after)"
  done
done
"""


def _seconds(field: str) -> float:
    minutes, seconds = field.rstrip("s").split("m")
    return int(minutes) * 60 + float(seconds)


def _cpu(times_line: str) -> float:
    user, system = times_line.split()
    return _seconds(user) + _seconds(system)


def measure(image: str) -> dict[str, float] | None:
    """Median CPU seconds of one update, per kind; None when ``image`` is not built here."""
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
        return None
    out = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "bash", image, "-c", _SCRIPT, "-", str(RUNS)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    runs: dict[str, list[float]] = {"base": [], "defaults": []}
    for line in out.splitlines():
        kind, rest = line.split(" ", 1)
        before, after = rest.split(" | ")
        runs[kind].append(_cpu(after) - _cpu(before))
    return {kind: statistics.median(values) for kind, values in runs.items()}


def main() -> None:
    for image in BASES:
        figures = measure(image)
        if figures is None:
            print(f"B23 {image}: not built here")
            continue
        base, defaults = figures["base"], figures["defaults"]
        print(f"B23 {image}: apt-get update {base:.2f} CPU-s with the base's index options, "
              f"{defaults:.2f} with Debian's defaults ({base / defaults:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
