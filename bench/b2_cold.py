"""B2: cold build of the default cell — total and per target, and total / slurm-debs compile time;
then the ci set's other cell while the first is cached — what it reuses and what it rebuilds.

Removes the default and ci sets' images first (their untagged layers go with them), so every
target, the mmdebstrap base included, is built from nothing. Takes about as long as two Slurm
compiles.
"""

from __future__ import annotations

from bench.common import invoke, summary


def _rows() -> list[dict[str, object]]:
    rows = summary()
    for r in rows:
        print(f"  {r['target']:<34} {r['status']:<7} {float(r['seconds']):>7.1f} s"
              f"  {int(r['size']) / 1e6:>6.0f} MB")  # fmt: skip
    return rows


def main() -> None:
    invoke("clean", "--images", "--set", "ci")
    invoke("clean", "--images", "--set", "default")
    total = invoke("build", "--set", "default", quiet=False)
    print("B2 per target (default cell, cold):")
    rows = _rows()
    assert all(r["status"] == "built" for r in rows), rows
    debs = next(float(r["seconds"]) for r in rows if str(r["target"]).startswith("slurm-debs/"))
    first = {str(r["target"]).split("/")[0]: float(r["seconds"]) for r in rows}
    first_ids = {str(r["target"]) for r in rows}
    print(f"B2 total wall: {total:.1f} s; slurm-debs (compile) target: {debs:.1f} s")
    print(f"B2 ratio total / slurm-debs: {total / debs:.2f} (target <= 1.5)")

    second = invoke("build", "--set", "ci", quiet=False)
    print("B2 second cell (ci set, the default cell cached):")
    rows = _rows()
    built = [r for r in rows if r["status"] == "built"]
    print(f"B2 second cell wall: {second:.1f} s")
    for r in built:
        target = str(r["target"])
        if target in first_ids:  # the default cell's own, built again only for ci's registry tags
            secs = float(r["seconds"])
            print(f"  tagged for the ci registry (layers cached): {target} {secs:.1f} s")
            continue
        component = target.split("/")[0]
        ratio = float(r["seconds"]) / first[component] if first[component] > 0 else 0.0
        print(f"  rebuilt {target:<34} second / first cell: {ratio:.2f}")


if __name__ == "__main__":
    main()
