"""arm64 images on this amd64 host, under emulation (qemu-user through binfmt_misc, which
scripts/setup registers): the matrix's arch axis builds a second base with mmdebstrap
--architectures=arm64 and, on it, the images that need neither a Slurm compile nor GPU user
space. Their binaries are aarch64, they run, the amd64 images of the same cell keep their tags and
IDs, and a second build of both arches is the no-op fast path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.common import copy_project
from slurmforge.app import Project, Selection
from tests.build.test_build_behaviour import _build, _notes

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
    header = data[512:]  # the tar member's content follows its 512-byte header
    assert header[:4] == b"\x7fELF", path
    return int.from_bytes(header[18:20], "little")


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


def test_gpu_user_space_is_refused_for_arm64_until_its_wheels_are_pinned(tmp_path: Path) -> None:
    root = copy_project(tmp_path)
    _with_arm64(root)
    proc = _build(root, "--set", "default", "--cell", f"{CELL}-arm64", "--component", "worker")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    first = proc.stderr.splitlines()[0]
    assert (
        first.startswith("error: ") and "cuda.12.2.2: pins GPU user space for amd64 only" in first
    )
