"""GPU user space in the worker and the jail: CUDA and NCCL at the versions versions.yaml pins,
nccl-tests, enroot and pyxis built from their pinned commits, no driver baked in.
(No GPU here: the libraries are loaded and asked their version, which needs no device.)"""

from __future__ import annotations

import re

import pytest

from slurmforge.app import Project
from tests.image.helpers import mount_standin_driver

GPU_ROLES = ("worker", "jail")
PYXIS = "/usr/lib/slurmforge/spank/pyxis.so"


def _release(project: Project, tool: str) -> tuple[str, object]:
    """The release of ``tool`` versions.yaml picks for the cell (by its Slurm or its CUDA)."""
    cell = project.cells[0]
    return project.config.versions.release(tool, cell.slurm, cell.cuda)


def _pins(project: Project) -> dict[str, str]:
    """Wheel name → version, as versions.yaml pins them for the cell."""
    cuda = project.config.versions.cuda[project.cells[0].cuda]
    wheels = [*cuda.runtime.wheels, *_release(project, "nccl")[1].wheels]
    return dict(w.requirement.split("==") for w in wheels)


@pytest.fixture(scope="session")
def prefix(project: Project) -> str:
    """Where the cell's CUDA user space is: /usr/local/cuda-<major.minor>."""
    return "/usr/local/cuda-" + ".".join(project.cells[0].cuda.split(".")[:2])


@pytest.mark.parametrize("role", GPU_ROLES)
def test_cuda_and_nccl_at_the_pinned_versions(
    hosts, project: Project, prefix: str, role: str
) -> None:
    host = hosts[role]
    cache = host.check_output("ldconfig -p")
    for soname in ("libcudart.so.12", "libnccl.so.2"):
        assert re.search(rf"\s{re.escape(soname)} \(.*\) => {prefix}/lib64/{soname}$", cache, re.M)
    installed = dict(
        line.split()
        for line in host.file(f"{prefix}/slurmforge-versions.txt").content_string.splitlines()
    )
    assert installed == _pins(project)


def test_the_libraries_report_those_versions(hosts, project: Project) -> None:
    """The jail (which has python3) asks the libraries themselves: CUDA 12.2 → 12020, NCCL a.b.c
    → a*10000+b*100+c (NCCL's own encoding since 2.9)."""
    cuda = project.cells[0].cuda.split(".")
    nccl = [int(x) for x in _release(project, "nccl")[0].split(".")]
    out = hosts["jail"].check_output(
        "python3 -c 'import ctypes; v=ctypes.c_int();"
        'ctypes.CDLL("libcudart.so.12").cudaRuntimeGetVersion(ctypes.byref(v)); print(v.value);'
        'ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v)); print(v.value)\''
    )
    assert out.split() == [
        str(int(cuda[0]) * 1000 + int(cuda[1]) * 10),
        str(nccl[0] * 10000 + nccl[1] * 100 + nccl[2]),
    ]


def test_worker_and_jail_carry_the_same_nccl_bytes(hosts, prefix: str) -> None:
    digests = {
        r: hosts[r].check_output(f"sha256sum {prefix}/lib64/libnccl.so.2").split()[0]
        for r in GPU_ROLES
    }
    assert len(set(digests.values())) == 1


@pytest.mark.parametrize("role", GPU_ROLES)
def test_every_feature_is_built_in(client, images, hosts, prefix: str, role: str) -> None:
    labels = client.images.get(images[role]).labels
    assert "io.slurmforge.skipped" not in labels
    portal = "jupyterlab," if role == "jail" else ""  # the web portal's notebook servers
    assert labels["io.slurmforge.features"] == f"cuda,enroot,{portal}nccl,nccl-tests,pyxis"
    host = hosts[role]
    # nccl-tests was compiled by a newer CUDA 12 (see versions.yaml): every symbol of every test
    # must resolve against the runtime and NCCL this image ships, not the compiler's.
    perfs = host.check_output("ls /usr/local/bin/ | grep '_perf$'").split()
    assert {"all_reduce_perf", "all_gather_perf", "sendrecv_perf"} <= set(perfs)
    for perf in perfs:
        out = host.run(f"ldd -r /usr/local/bin/{perf}")
        assert out.rc == 0
        assert "not found" not in out.stdout + out.stderr
        assert "undefined symbol" not in out.stdout + out.stderr
        for soname in ("libcudart.so.12", "libnccl.so.2"):
            assert f"{soname} => {prefix}/lib64/{soname}" in out.stdout
    assert not host.file("/opt/cuda-build").exists  # the compiler stays in its stage


@pytest.mark.parametrize("role", ("slurmd", "worker", "jail"))
def test_enroot_from_source_with_caps(hosts, project: Project, role: str) -> None:
    """enroot and enroot+caps, built from the pinned tag: the version it reports, and the file
    capabilities that let unprivileged users import and convert images."""
    host = hosts[role]
    version = _release(project, "enroot")[0]
    assert host.check_output("enroot version") == version
    assert host.package("enroot+caps").is_installed
    caps = host.check_output("getcap /usr/bin/enroot-mksquashovlfs /usr/bin/enroot-aufs2ovlfs")
    assert re.search(r"enroot-mksquashovlfs .*cap_sys_admin[=+]ep", caps), caps
    assert re.search(r"enroot-aufs2ovlfs .*cap_sys_admin,cap_mknod[=+]ep", caps), caps
    assert host.file("/etc/enroot/enroot.conf").contains("ENROOT_DATA_PATH")


@pytest.mark.parametrize("role", ("slurmd", "worker", "jail"))
def test_pyxis_loads_into_this_slurm(hosts, project: Project, role: str) -> None:
    """pyxis was compiled against this cell's spank.h: Slurm loads it (a plugin built for another
    release is refused with 'Incompatible plugin version') and srun offers its options."""
    host = hosts[role]
    cell = project.cells[0]
    version = _release(project, "pyxis")[0]
    pkg = host.package("slurmforge-pyxis")
    assert pkg.is_installed and pkg.version == f"{version}+slurm{cell.slurm}"
    assert "not found" not in host.check_output(f"ldd {PYXIS}")
    if role == "jail":  # the client lives in the jail: srun --help lists the container options
        conf = (
            "printf 'ClusterName=t\\nSlurmctldHost=localhost\\nPlugStackConfig=/tmp/p.conf\\n'"
            f" > /tmp/s.conf && echo 'required {PYXIS}' > /tmp/p.conf"
        )
        out = host.check_output(f"{conf} && SLURM_CONF=/tmp/s.conf srun --help 2>&1")
        assert "--container-image" in out, out


def test_worker_has_no_driver_baked_in(hosts) -> None:
    host = hosts["worker"]
    assert host.file("/usr/local/nvidia/lib64").is_directory
    assert host.check_output("ls -A /usr/local/nvidia/lib64 /usr/local/nvidia/bin") == (
        "/usr/local/nvidia/bin:\n\n/usr/local/nvidia/lib64:"
    )
    assert "libcuda.so" not in host.check_output("ldconfig -p").replace("libcudart.so", "")
    assert host.file("/etc/slurmforge/entrypoint.d/30-gpu-driver.sh").exists


def test_worker_mounts_a_kubernetes_driver_root(client, images, tmp_path) -> None:
    """The k8s target's GPU pods: the node's driver directories arrive read-only under
    /run/nvidia/driver (hostPath volumes) and the entrypoint binds the running driver's files
    onto /usr/local/nvidia. Stand-ins: the synthetic driver root (tests/driver_root.py, with a
    leftover older driver) for a GPU node, and its version file for /proc/driver/nvidia/version
    (a container sees this host's /proc, which has no NVIDIA module)."""
    out = mount_standin_driver(client, images["worker"], tmp_path, "amd64")
    assert "libcuda.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so.1" in out, out
