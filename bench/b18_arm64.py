"""B18: a cold build of the default cell's Slurm node image for arm64 (Slurm cross-compiled on the
amd64 builder, the role images installed under emulation) against the same for amd64, in the
same run: wall time of each, and the ratio the issue sets at <= 2.0 (an all-emulated Slurm
compile is about ten times the native one).

Works on a copy of the project whose set has both arches, under a registry prefix of its own,
with a nonce step after every FROM of the templates the Slurm images use, so that neither arch
finds a layer of an earlier build (the distro bases stay: they are not Slurm's). The copy shares
the internal tags (slurmforge/slurm-debs:…), which the real project's next build puts back; this
benchmark runs that build at the end. Takes one native and one cross Slurm compile, and the
emulated installs: about 20 minutes on 2 cores.

With --launch (or after the build): a step launch on an arm64 node under emulation against one
on an amd64 node, in one mixed cluster of the grace set's images (amd64 controller and login, one
node of each arch): `srun -N1 -w NODE true` from a jail user, median of 20 each.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker
import yaml

from bench.b7_jobs import LAUNCHES, cluster_file, in_jail, launch_ms
from bench.common import copy_project, invoke, summary
from tests.build.helpers import CELL, GRACE, with_arm64

TEMPLATES = ("macros.j2", "slurm-debs/Dockerfile.j2", "runtime/Dockerfile.j2",
             "slurmd/Dockerfile.j2")  # fmt: skip


def _cold(root: Path) -> None:
    nonce = uuid.uuid4().hex[:12]
    for name in TEMPLATES:
        path = root / "images" / name
        lines = path.read_text().splitlines(keepends=True)
        out = []
        for line in lines:
            out.append(line)
            if line.startswith("FROM "):
                out.append(f"RUN echo b18-{nonce}\n")
        path.write_text("".join(out))
    versions = root / "versions.yaml"
    text = versions.read_text().replace("127.0.0.1:5000/slurmforge", "bench.invalid/b18")
    versions.write_text(text)


def _build(root: Path, cell: str) -> tuple[float, list[dict[str, object]]]:
    took = invoke("build", "--set", "default", "--cell", cell, "--component", "slurmd", root=root)
    return took, summary(root)


def launch() -> None:
    """Step launch on the arm64 node (emulated) against the amd64 node, in one mixed cluster."""
    invoke("build", "--set", "grace", "--cell", GRACE)
    invoke("build", "--set", "grace", "--cell", f"{GRACE}-arm64",
           "--component", "slurmd", "--component", "jail")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="b18-") as tmp:
        root = Path(tmp)
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        path = cluster_file(root, "sfbench18")
        data = yaml.safe_load(path.read_text())
        (cpu,) = (ns for ns in data["nodesets"] if ns["name"] == "cpu")
        data.update(
            images={"set": "grace", "cell": GRACE},
            nodesets=[{**cpu, "replicas": 1}, {**cpu, "name": "grace", "replicas": 1,
                                               "arch": "arm64"}],
            partitions=[{"name": "main", "nodesets": ["cpu", "grace"], "default": True}],
        )  # fmt: skip
        path.write_text(yaml.safe_dump(data))
        where = ["--cluster", str(path), "--out", str(root / "out")]
        try:
            invoke("deploy", *where)
            jail = in_jail(docker.from_env(), "sfbench18")
            amd64, arm64 = (launch_ms(jail, f"-N1 -w {node}") for node in ("cpu-0", "grace-0"))
        finally:
            invoke("down", "--volumes", *where)
    print(f"B18 step launch, srun -N1 true, median of {LAUNCHES}:")
    print(f"  amd64 node   {amd64:6.0f} ms")
    print(f"  arm64 node   {arm64:6.0f} ms (emulated)  ratio {arm64 / amd64:.2f}")


def main() -> None:
    if "--launch" in sys.argv:
        launch()
        return
    with tempfile.TemporaryDirectory(prefix="b18-") as tmp:
        root = copy_project(Path(tmp), share_build_lock=True)
        with_arm64(root)
        _cold(root)
        results = {}
        for arch, cell in (("arm64", f"{CELL}-arm64"), ("amd64", CELL)):
            took, rows = _build(root, cell)
            results[arch] = took
            print(f"B18 {arch}: {took:.1f} s wall, cold")
            for r in rows:
                print(f"  {r['target']:<36} {r['status']:<7} {float(r['seconds']):>7.1f} s")
        ratio = results["arm64"] / results["amd64"]
        print(f"B18 ratio arm64 / amd64: {ratio:.2f} (target <= 2.0)")
    start = time.perf_counter()
    invoke("build")  # the real project's tags, back on its own images
    print(f"B18 the project's own tags restored in {time.perf_counter() - start:.1f} s")
    launch()


if __name__ == "__main__":
    main()
