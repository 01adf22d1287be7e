"""B2: cold build of the default cell — total and per target, and total / slurm-debs compile time.

Removes the default set's images first (their untagged layers go with them), so every target,
the mmdebstrap base included, is built from nothing. Takes about as long as a Slurm compile.
"""

from __future__ import annotations

from bench.common import invoke, summary


def main() -> None:
    invoke("clean", "--images", "--set", "default")
    total = invoke("build", "--set", "default", quiet=False)
    rows = summary()
    assert all(r["status"] == "built" for r in rows), rows
    print("B2 per target:")
    for r in rows:
        print(f"  {r['target']:<32} {r['seconds']:>8.1f} s  {int(r['size']) / 1e6:>6.0f} MB")
    debs = next(float(r["seconds"]) for r in rows if str(r["target"]).startswith("slurm-debs/"))
    print(f"B2 total wall: {total:.1f} s; slurm-debs (compile) target: {debs:.1f} s")
    print(f"B2 ratio total / slurm-debs: {total / debs:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
