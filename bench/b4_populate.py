"""B4: jail populate vs plain `rsync -a` of the same tree, both measured here and now.

Each run starts a container of the jail image against a fresh Docker volume:
- first copy: `invoke jail-populate`'s code path (rsync -aHAX with the user-state rules, account
  merge, sentinel) vs `rsync -a --one-file-system` of the same root into another fresh volume;
- unchanged re-run: populate with the same digest (sentinel check) vs a second `rsync -a` pass
  over the already-synced volume (rsync's own no-op).
Container start-up is inside both figures, except where populate needs no container: when the
host can read the volume's sentinel it answers the re-run without starting one. Also reported:
the re-run inside one container (the populate script vs the rsync pass), without start-up.
Targets: first copy <= 1.2x rsync, re-run <= 0.1x rsync.
Also: the first copy for a cluster without the web portal (its JupyterLab left out, as every
such deploy populates) against the whole image's.
"""

from __future__ import annotations

import io
import statistics
import time
import uuid

import docker

from bench.common import ROOT
from slurmforge import jail
from slurmforge.app import Project, Selection
from slurmforge.deploy.spec.portal import PortalSpec
from slurmforge.engine import Engine

RUNS = 3
RSYNC = (
    "rsync -a --one-file-system --exclude=/proc/* --exclude=/sys/* --exclude=/dev/* "
    "--exclude=/jail / /jail/"
)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    client = docker.from_env()
    engine = Engine(client)
    project = Project(Selection(ROOT / "versions.yaml", "default", (), ("jail",)))
    ref = next(t.ref for t in project.targets if t.component == "jail")
    image_id = client.images.get(ref).id

    def rsync(volume: str) -> None:
        client.containers.run(
            image_id,
            entrypoint=["bash", "-c", RSYNC],
            volumes={volume: {"bind": "/jail", "mode": "rw"}},
            remove=True,
        )

    def inside(populated: str, synced: str) -> tuple[float, float]:
        """Seconds for the populate entrypoint and for the rsync pass, timed in one container."""
        script = (
            f"export SLURMFORGE_JAIL_DIGEST={image_id}; "
            "s=$(date +%s%N); /usr/local/sbin/slurmforge-jail/populate /jail >/dev/null; "
            "m=$(date +%s%N); " + RSYNC.replace("/jail", "/synced") + "; e=$(date +%s%N); "
            "echo $((m - s)) $((e - m))"
        )
        out = client.containers.run(
            image_id,
            entrypoint=["bash", "-c", script],
            volumes={
                populated: {"bind": "/jail", "mode": "rw"},
                synced: {"bind": "/synced", "mode": "rw"},
            },
            remove=True,
        )
        pop_ns, rs_ns = (int(x) for x in out.split())
        return pop_ns / 1e9, rs_ns / 1e9

    def populate(volume: str, skip: tuple[str, ...] = ()) -> None:
        jail.populate(engine, ref, volume, out=io.StringIO(), skip=skip)

    figures: dict[str, list[float]] = {
        k: [] for k in ("pop1", "rs1", "pop2", "rs2", "pop2c", "rs2c", "pop1s")
    }
    for _ in range(RUNS):
        a, b, c = (f"sf-bench-{uuid.uuid4().hex[:8]}" for _ in range(3))
        for name in (a, b, c):
            client.volumes.create(name)
        try:
            figures["rs1"].append(timed(lambda b=b: rsync(b)))
            figures["pop1"].append(timed(lambda a=a: populate(a)))
            figures["pop1s"].append(timed(lambda c=c: populate(c, PortalSpec().jail_skip)))
            figures["rs2"].append(timed(lambda b=b: rsync(b)))
            figures["pop2"].append(timed(lambda a=a: populate(a)))
            pop, rs = inside(a, b)
            figures["pop2c"].append(pop)
            figures["rs2c"].append(rs)
        finally:
            for name in (a, b, c):
                client.volumes.get(name).remove(force=True)
    med = {k: statistics.median(v) for k, v in figures.items()}
    size = client.images.get(ref).attrs["Size"] / 1e6
    print(f"jail image {ref} ({size:.0f} MB), median of {RUNS}")
    print(
        f"first copy:  populate {med['pop1']:.2f} s, rsync -a {med['rs1']:.2f} s, "
        f"ratio {med['pop1'] / med['rs1']:.2f} (target <= 1.2)"
    )
    print(
        f"first copy without the portal's JupyterLab: {med['pop1s']:.2f} s, "
        f"ratio {med['pop1s'] / med['pop1']:.2f} of the whole image's"
    )
    print(
        f"re-run:      populate {med['pop2']:.2f} s, rsync -a no-op {med['rs2']:.2f} s, "
        f"ratio {med['pop2'] / med['rs2']:.2f} (target <= 0.1)"
    )
    print(
        f"re-run in one container: populate {med['pop2c'] * 1000:.0f} ms, rsync -a no-op "
        f"{med['rs2c'] * 1000:.0f} ms, ratio {med['pop2c'] / med['rs2c']:.3f}"
    )


if __name__ == "__main__":
    main()
