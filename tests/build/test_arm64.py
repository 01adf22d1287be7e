"""arm64 images on this amd64 host, under emulation (qemu-user through binfmt_misc, which
scripts/setup registers): the matrix's arch axis builds a second base with mmdebstrap
--architectures=arm64 and, on it, the cell's images; Slurm's packages and nccl-tests for it are
cross-compiled on the amd64 builder. Their binaries are aarch64, they run, the amd64 images of the
same cell keep their tags and IDs, and a second build of both arches is the no-op fast path."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from bench.common import copy_project
from slurmforge.app import Project, Selection
from tests.build.helpers import CELL, GRACE, build_notes, run_build, with_arm64
from tests.image.helpers import SECRET_FILES, STUB_CONF, layer_files, mount_standin_driver

AARCH64 = 0xB7  # ELF e_machine


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
    # the exporter: the arm64 runtime the prebuild's grace set made (the same for this cell)
    # and one package installed under emulation (mariadb's postinst took 549 s here). In CI the
    # prebuild makes it too (the same target), so this build only tags it; alone, it builds it
    root = copy_project(tmp_path, share_build_lock=True)
    with_arm64(root)
    amd64 = {c: client.images.get(ref).id for c, ref in images.items()}
    args = ("--set", "default", "--cell", f"{CELL}-arm64", "--component", "exporter")
    proc = run_build(root, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    targets = {t.id: t for t in Project(Selection(root / "versions.yaml", "default")).targets}
    base = targets["base/debian12-arm64"]
    exporter = targets["exporter/debian12-24.05.8-arm64"]
    assert exporter.ref.endswith(f"exporter:{CELL}-arm64")
    for target in (base, exporter):
        attrs = client.images.get(target.ref).attrs
        assert (attrs["Os"], attrs["Architecture"]) == ("linux", "arm64"), target.ref
    assert _elf_machine(client, exporter.ref, "/usr/sbin/munged") == AARCH64
    assert _elf_machine(client, base.ref, "/usr/bin/bash") == AARCH64
    # it runs here: the exporter on the package installed under emulation, and munged
    script = (
        "uname -m && python3 -c 'import prometheus_client' && "
        "python3 /usr/local/lib/slurmforge/slurm_exporter.py --help && munged --version"
    )
    out = subprocess.run(
        ["docker", "run", "--rm", "--platform", "linux/arm64", "--entrypoint", "bash",
         exporter.ref, "-c", script],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    assert out.splitlines()[0] == "aarch64" and "{cluster,gpu}" in out and "munge-" in out, out
    # the amd64 images of the cell are untouched (same tags, same IDs)
    assert {c: client.images.get(ref).id for c, ref in images.items()} == amd64
    # nothing changed: both arches are answered without Docker
    for selection in (args, ("--set", "default", "--cell", CELL, "--component", "exporter")):
        assert run_build(root, *selection).returncode == 0
        assert run_build(root, *selection).returncode == 0
        assert build_notes(root) == {"unchanged since last build"}, selection
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
    root = copy_project(tmp_path, share_build_lock=True)
    with_arm64(root)
    args = ("--set", "default", "--cell", f"{CELL}-arm64", "--component", "slurmd")
    proc = run_build(root, *args)
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
        'LD_TRACE_LOADED_OBJECTS=1 /lib/ld-linux-aarch64.so.1 "$f" '
        '| sed -n "/not found/s|^|$f: |p"; done'
    )  # what ldd asks the loader, without its emulated shell per file: 3.5 s where ldd took 27
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
    files = layer_files(client, [slurmd])[slurmd]
    assert any(f.endswith("usr/sbin/munged") for f in files)
    names = {*SECRET_FILES, *(f".wh.{n}" for n in SECRET_FILES)}
    assert [f for f in files if f.rsplit("/", 1)[-1] in names or "/ssh_host_" in f] == []


def _grace_arm64(tmp_path: Path, client, component: str, builder: str) -> str:
    """The grace set's arm64 ``component``, built in a copy of the project at ``tmp_path`` (the
    prebuild has made it by the time this runs): its reference, once it is checked to be arm64
    and ``builder``, which made a part of it, amd64."""
    root = copy_project(tmp_path, share_build_lock=True)
    args = ("--set", "grace", "--cell", f"{GRACE}-arm64", "--component", component)
    proc = run_build(root, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    targets = {t.id: t for t in Project(Selection(root / "versions.yaml", "grace")).targets}
    ref = next(t.ref for t in targets.values() if (t.component, t.arch) == (component, "arm64"))
    assert client.images.get(targets[builder].ref).attrs["Architecture"] == "amd64"
    assert client.images.get(ref).attrs["Architecture"] == "arm64"
    return ref


def test_the_arm64_gpu_worker_runs_cross_compiled_nccl_tests_and_an_aarch64_driver(
    tmp_path: Path, client
) -> None:
    """The grace set's arm64 worker: CUDA 12.9 and NCCL from NVIDIA's aarch64 (sbsa) wheels,
    nccl-tests cross-compiled on the amd64 builder (its own builder image, amd64), every binary
    aarch64 with each library it needs found; and an arm64 host's stand-in driver, mounted the
    way the Kubernetes target mounts it, is bound read-only and loadable under emulation."""
    worker = _grace_arm64(tmp_path, client, "worker", "nccl-tests/debian12-12.9.1-arm64")
    perf = ("all_reduce_perf", "all_gather_perf", "alltoall_perf", "sendrecv_perf")
    for name in perf:
        assert _elf_machine(client, worker, f"/usr/local/bin/{name}") == AARCH64, name
    script = " && ".join(
        [
            "cat /usr/local/cuda/slurmforge-versions.txt",
            *(f"ldd /usr/local/bin/{name}" for name in perf),
            "all_reduce_perf -h | head -1",
        ]
    )
    out = subprocess.run(
        ["docker", "run", "--rm", "--platform", "linux/arm64", "--entrypoint", "bash", worker,
         "-c", script], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not found" not in out.stdout, out.stdout
    lines = out.stdout.splitlines()
    assert lines[:2] == ["nvidia-cuda-runtime-cu12 12.9.79", "nvidia-nccl-cu12 2.27.7"]
    assert "libnccl.so.2 => /usr/local/cuda-12.9/lib64/libnccl.so.2" in out.stdout
    assert lines[-1].startswith("USAGE: all_reduce_perf")
    said = mount_standin_driver(client, worker, tmp_path, "arm64")
    assert "libcuda.so.1 (libc6,AArch64) => /usr/local/nvidia/lib64/libcuda.so.1" in said, said
    # no driver baked in, no secret or host key in any layer
    files = layer_files(client, [worker])[worker]
    assert any(f.endswith("usr/local/bin/all_reduce_perf") for f in files)
    assert not [f for f in files if "/libcuda.so" in f or "/libnvidia-ml.so" in f]
    names = {*SECRET_FILES, *(f".wh.{n}" for n in SECRET_FILES)}
    assert [f for f in files if f.rsplit("/", 1)[-1] in names or "/ssh_host_" in f] == []


def test_the_arm64_jails_jupyterlab_is_made_natively_and_runs_from_its_byte_code(
    tmp_path: Path, client
) -> None:
    """The grace set's arm64 jail: JupyterLab's venv made on the amd64 builder (images/jupyter:
    the lock's arm64 wheels unpacked and byte-compiled by the same Debian Python), not by pip
    under emulation. Under emulation, on a read-only root as users see the jail, it runs the
    lock's JupyterLab with the queue view, its compiled extensions are aarch64, and every module
    a notebook server imports is loaded from that byte code: none stale, none compiled from
    source at each start."""
    jail = _grace_arm64(tmp_path, client, "jail", "jupyter/debian12-arm64")
    venv = "/usr/lib/slurmforge/jupyter"
    site = f"{venv}/lib/python3.11/site-packages"
    assert _elf_machine(client, jail, f"{site}/_cffi_backend.cpython-311-aarch64-linux-gnu.so") == (
        AARCH64
    )
    # One emulated Python (each start of one costs 40 s here, 100 under CI's load): the modules
    # of the notebook server the portal starts (batchspawner-singleuser), then what `jupyter
    # server extension list` does, which loads and checks each enabled extension; the venv's
    # scripts name that same Python
    program = (
        "import sys, batchspawner.singleuser; from jupyter_server.serverapp import main; "
        "sys.argv = ['jupyter-server', 'extension', 'list']; sys.exit(main())"
    )
    script = (
        f'PYTHONVERBOSE=1 {venv}/bin/python -c "{program}" >/tmp/list 2>/tmp/v '
        "|| { cat /tmp/list /tmp/v >&2; exit 1; }; "
        f"head -qn1 {venv}/bin/batchspawner-singleuser {venv}/bin/jupyter-server; "
        "grep -c \"^# code object from '.*\\.pyc'$\" /tmp/v; "
        "grep -E \"^# bytecode is stale|^# code object from '.*\\.py'$\" /tmp/v || true; "
        "grep -E '^ +[a-z_]+ [0-9.]* .*OK' /tmp/list"
    )
    out = subprocess.run(
        ["docker", "run", "--rm", "--platform", "linux/arm64", "--read-only", "--tmpfs", "/tmp",
         "--entrypoint", "bash", jail, "-c", script],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == [f"#!{venv}/bin/python"] * 2, out.stdout
    from_byte_code = lines[2]
    from_source = [line for line in lines[3:] if line.startswith("# ")]
    valid = dict(re.findall(r"^ +(\w+) ([0-9.]*) .*OK", out.stdout, re.M))
    lock = (tmp_path / "images/jail/jupyterlab.lock").read_text()
    assert valid["jupyterlab"] == re.search(r"^jupyterlab==(\S+)", lock, re.M).group(1), out.stdout
    assert "jupyterlab_slurm" in valid, out.stdout  # the queue view, loaded and checked
    assert int(from_byte_code) > 500, out.stdout  # jupyter_server alone imports hundreds
    assert from_source == []
