"""B26: what a filesystem without a journal costs the suite's churn, and what scripts/journaled
gives back.

The suite copies trees of tens of thousands of files and deletes them all along (a jail populated
into each test cluster's volume, image layers, build contexts). ext4 without a journal (CI's fresh
machines have one) will not reuse an inode freed in the last minute or more, and finds that out by
walking the group's free inodes for every file it creates. The same work is timed twice in one
run, as system CPU seconds of `cp -a` and `rm -rf`:

- baseline: under a directory of the filesystem of --under (default /var/tmp), as it is;
- journaled: under a mount scripts/journaled makes beside it (skipped, and said, where that
  filesystem has a journal: there is nothing to give back).

A tree like a jail's (--files files of 4 KiB in directories of 100) is copied --rounds times, each
copy deleted before the next, as a test cluster's volume is. Needs root.

    python -m bench.b26_scratch_fs [--files 42000] [--rounds 3] [--under /var/tmp]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_tree(root: Path, files: int) -> None:
    blob = b"x" * 4096
    for n in range(files):
        directory = root / f"d{n // 100:05d}"
        if n % 100 == 0:
            directory.mkdir(parents=True)
        (directory / f"f{n % 100:03d}").write_bytes(blob)


def children_sys() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime


def churn(where: Path, files: int, rounds: int) -> list[float]:
    """System seconds of each round's copy and delete of a tree made under ``where``."""
    src = where / "src"
    make_tree(src, files)
    seconds = []
    for _ in range(rounds):
        before = children_sys()
        subprocess.run(["cp", "-a", str(src), str(where / "copy")], check=True)
        subprocess.run(["rm", "-rf", str(where / "copy")], check=True)
        seconds.append(children_sys() - before)
    shutil.rmtree(src)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=42000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--under", default="/var/tmp")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.under, prefix="b26-") as tmp:
        base = churn(Path(tmp), args.files, args.rounds)
        print(f"baseline  (as {args.under} is): " + ", ".join(f"{s:.1f}" for s in base)
              + f" s of system time, {sum(base):.1f} in all")  # fmt: skip
        mount = Path(tmp) / "journaled"
        made = subprocess.run([str(ROOT / "scripts" / "journaled"), str(mount)])
        if made.returncode != 0:
            print("journaled: not made here (see above): nothing to compare")
            return 0
        try:
            fast = churn(mount, args.files, args.rounds)
        finally:
            subprocess.run(["umount", str(mount)], check=True)
            Path(f"{mount}.img").unlink()
        print("journaled (scripts/journaled): " + ", ".join(f"{s:.1f}" for s in fast)
              + f" s of system time, {sum(fast):.1f} in all")  # fmt: skip
        print(f"ratio journaled/baseline: {sum(fast) / sum(base):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
