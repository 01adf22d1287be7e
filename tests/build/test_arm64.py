"""arm64 images on this amd64 host, under emulation (qemu-user through binfmt_misc, which
scripts/setup registers): the matrix's arch axis builds a second base with mmdebstrap
--architectures=arm64 and, on it, the cell's images; Slurm's packages for it are cross-compiled on
the amd64 builder. Their binaries are aarch64, they run, the amd64 images of the same cell keep
their tags and IDs, and a second build of both arches is the no-op fast path."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from bench.common import copy_project
from slurmforge.app import Project, Selection
from tests.build.test_build_behaviour import _build, _notes
from tests.image.test_images import SECRET_FILES, STUB_CONF, _layer_files

CELL = "24.05.8-cuda12.2.2-debian12"
AARCH64 = 0xB7  # ELF e_machine


def _with_arm64(root: Path) -> None:
    """The default set with both arches (the set's cuda line is followed by its arch)."""
    path = root / "versions.yaml"
    text = path.read_text()
    anchor = '      cuda: ["12.2.2"]\n'
    assert anchor in text
    path.write_text(text.replace(anchor, anchor + "      arch: [amd64, arm64]\n", 1))


def _elf_machine(client, ref: str, path: str) -> int:
    """e_machine of ``path`` in image ``ref``, read from a container that never starts."""
    container = client.containers.create(ref, command=["true"], entrypoint=[])
    try:
        stream, _ = container.get_archive(path)
        data = b"".join(stream)
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:  # (a PAX header holds file capabilities)
        member = tar.next()
        assert member is not None and member.isfile(), path
        head = tar.extractfile(member).read(20)  # type: ignore[union-attr]
    assert head[:4] == b"\x7fELF", path
    return int.from_bytes(head[18:20], "little")


def test_arm64_images_build_under_emulation_beside_the_amd64_ones(
    tmp_path: Path, images, client
) -> None:
    root = copy_project(tmp_path)
    _with_arm64(root)
    amd64 = {c: client.images.get(ref).id for c, ref in images.items()}
    args = ("--set", "default", "--cell", f"{CELL}-arm64", "--component", "mariadb")
    proc = _build(root, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    targets = {t.id: t for t in Project(Selection(root / "versions.yaml", "default")).targets}
    base, mariadb = targets["base/debian12-arm64"], targets["mariadb/debian12-arm64"]
    assert mariadb.ref.endswith(f"mariadb:{CELL}-arm64")
    for target in (base, mariadb):
        attrs = client.images.get(target.ref).attrs
        assert (attrs["Os"], attrs["Architecture"]) == ("linux", "arm64"), target.ref
    assert _elf_machine(client, mariadb.ref, "/usr/sbin/mariadbd") == AARCH64
    assert _elf_machine(client, base.ref, "/usr/bin/bash") == AARCH64
    # it runs here: the server's own version, and the scheduled backup's program
    out = subprocess.run(
        ["docker", "run", "--rm", "--platform", "linux/arm64", "--entrypoint", "bash",
         mariadb.ref, "-c", "uname -m && mariadbd --version && slurmforge-backup --help"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    assert out.splitlines()[0] == "aarch64" and "mariadbd" in out and "--keep KEEP" in out
    # the amd64 images of the cell are untouched (same tags, same IDs)
    assert {c: client.images.get(ref).id for c, ref in images.items()} == amd64
    # nothing changed: both arches are answered without Docker
    for selection in (args, ("--set", "default", "--cell", CELL, "--component", "mariadb")):
        assert _build(root, *selection).returncode == 0
        assert _build(root, *selection).returncode == 0
        assert _notes(root) == {"unchanged since last build"}, selection
    plan = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(root), "matrix", "--format", "json"],
        cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert [r["arch"] for r in json.loads(plan.stdout)] == ["amd64", "arm64"]


def test_slurm_for_arm64_is_cross_compiled_and_its_node_image_runs_here(
    tmp_path: Path, images, client
) -> None:
    """The arm64 slurmd image: Slurm's packages cross-compiled on the amd64 builder (with the jail
    plugin, pyxis and enroot), installed into an arm64 image; aarch64 by their ELF headers, every
    plugin finds its libraries, and srun and slurmd run here under emulation."""
    root = copy_project(tmp_path)
    _with_arm64(root)
    args = ("--set", "default", "--cell", f"{CELL}-arm64", "--component", "slurmd")
    proc = _build(root, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    targets = {t.id: t for t in Project(Selection(root / "versions.yaml", "default")).targets}
    debs = client.images.get(targets["slurm-debs/debian12-24.05.8-arm64"].ref)
    assert debs.attrs["Architecture"] == "amd64"  # the builder runs natively
    slurmd = targets["slurmd/debian12-24.05.8-arm64"].ref
    assert client.images.get(slurmd).attrs["Architecture"] == "arm64"
    for path in (
        "/usr/sbin/slurmd", "/usr/sbin/slurmstepd", "/usr/bin/srun",
        "/usr/lib/slurmforge/spank/pyxis.so", "/usr/lib/slurmforge/spank/jail.so",
        "/usr/bin/enroot-nsenter", "/usr/bin/enroot-switchroot", "/usr/bin/enroot-mksquashovlfs",
    ):  # fmt: skip
        assert _elf_machine(client, slurmd, path) == AARCH64, path
    script = (
        f"set -e; uname -m; {STUB_CONF} srun --version; {STUB_CONF} slurmd -V; "
        "dpkg --print-architecture; "
        "for f in /usr/lib/*/slurm/*.so /usr/lib/slurmforge/spank/*.so; do "
        'ldd "$f" | sed -n "/not found/s|^|$f: |p"; done'
    )
    out = subprocess.run(
        ["docker", "run", "--rm", "--platform", "linux/arm64", "--entrypoint", "bash", slurmd,
         "-c", script],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:4] == ["aarch64", "slurm 24.05.8", "slurm 24.05.8", "arm64"], lines
    assert lines[4:] == []  # no plugin misses a library
    # what the image tier checks of every image: no secret, no host key in any layer
    files = _layer_files(client, slurmd)
    assert any(f.endswith("usr/sbin/munged") for f in files)
    names = {*SECRET_FILES, *(f".wh.{n}" for n in SECRET_FILES)}
    assert [f for f in files if f.rsplit("/", 1)[-1] in names or "/ssh_host_" in f] == []


def test_gpu_user_space_is_refused_for_arm64_until_its_wheels_are_pinned(tmp_path: Path) -> None:
    root = copy_project(tmp_path)
    _with_arm64(root)
    proc = _build(root, "--set", "default", "--cell", f"{CELL}-arm64", "--component", "worker")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    first = proc.stderr.splitlines()[0]
    assert (
        first.startswith("error: ") and "cuda.12.2.2: pins GPU user space for amd64 only" in first
    )
