"""A cluster of two arches, as GB200 sites run them: amd64 slurmctld, login and one amd64 node,
beside one arm64 node (a node set with ``arch: arm64``, running the grace set's arm64 cell under
qemu-user here). One jail: the arm64 node sees it with the arm64 jail's /usr, so a user's home,
account and files are the same on both, and each node runs its own arch's programs.

What emulation cannot show: a container *started* on the arm64 node. enroot enters a user
namespace, which qemu-user cannot create (it runs a thread of its own beside the program, and
unshare(CLONE_NEWUSER) refuses threaded callers: qemu issue 871). The test unpacks an arm64
image there with the node's own enroot, which is as far as an emulated node goes."""

from __future__ import annotations

import warnings

import docker
import pytest

from slurmforge.versions import load as load_versions
from tests.cluster.deployed import Clusters, Deployed, squashfs_image
from tests.common import ROOT, need_sources
from tests.mixed_arch import CELL, CUDA, SET, build_cells

pytestmark = pytest.mark.cluster

USER = "grace"
HELLO = r"""
#include <mpi.h>
#include <stdio.h>
#include <sys/utsname.h>
int main(int argc, char **argv) {
  int rank, size, sum = 0;
  struct utsname u;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  uname(&u);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d of %d on %s (%s): sum %d\n", rank, size, u.nodename, u.machine, sum);
  MPI_Finalize();
  return 0;
}
"""
PROBE = """/sbin/ldconfig -p | grep -F 'libcudart.so.12 ' | sed 's/ =>.*//' | tr -d '\\t'
python3 - << 'PY'
import ctypes
v = ctypes.c_int()
ctypes.CDLL("libcudart.so.12").cudaRuntimeGetVersion(ctypes.byref(v))
print(v.value)
ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v))
print(v.value)
PY"""
UNPACK = """set -e
# unsquashfs, emulated: one inflating thread, and a bound on each try. Twice in many runs, on a
# loaded 2-core host, an emulated unsquashfs hung (qemu-user's threads); a try that hangs is
# killed with its whole process group and made once more, and the test says so
export ENROOT_MAX_PROCESSORS=1
create() { timeout -k 10 150 enroot create -f -n armctr SQSH > create.log 2>&1; }
create || { code=$?; ((code == 124 || code == 137)) && echo hung >> create.hung && create; } || {
  cat create.log >&2; exit 1; }
echo "$(uname -m) $(enroot list)"
data=$(eval echo "$(sed -n 's/^ENROOT_DATA_PATH *//p' /etc/enroot/enroot.conf)")
echo "$data"
od -An -tx1 -j18 -N1 "$data/armctr/usr/bin/ls" | tr -d ' '
grep '^ID=' "$data/armctr/etc/os-release"
enroot remove -f armctr"""
# stages the source, builds it once per arch (each node its own), runs both ranks as one job
JOB = """#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=1 -o mixed-%j.out
set -euo pipefail
mkdir -p "$HOME/mixed" && cp "$HOME/hello.c" "$HOME/mixed/" && cd "$HOME/mixed"
srun --ntasks-per-node=1 bash -c 'mpicc -O2 -o "hello.$(uname -m)" hello.c'
srun bash -c 'exec "./hello.$(uname -m)"'
"""


@pytest.fixture(scope="module")
def arm64_base() -> str:
    """The cells built; the arm64 base's reference."""
    need_sources()
    build_cells()
    return "slurmforge/base:debian12-arm64"


@pytest.fixture(scope="module")
def mixed(arm64_base: str, clusters: Clusters) -> Deployed:
    changes = {
        "images": {"set": SET, "cell": CELL},
        # the emulated node answers a step's launch after slurmstepd, emulated, has loaded its
        # plugins: past Slurm's default 10 s on loaded cores (a fresh CI run, twice: "Task
        # launch ... failed on node grace-0: Socket timed out", the node then completing past
        # the next test's 5 minutes); a site with slow nodes raises it the same way
        "slurm": {"conf": {"MessageTimeout": 60}},
        "nodesets": [
            {"name": "cpu", "definitions": ["cpu-small"], "replicas": 1},
            {"name": "grace", "definitions": ["cpu-small"], "replicas": 1, "arch": "arm64"},
        ],
        "partitions": [{"name": "main", "nodesets": ["cpu", "grace"], "default": True}],
    }
    cluster = clusters.deploy("sfarch", clusters.root("mixed"), **changes)
    cluster.user(USER)
    return cluster


# what a step of the emulated node may take on loaded cores: a fresh CI run on a slow day took
# over 5 minutes to compile and run the MPI job on both arches
EMULATED = 600  # within the 900 s pytest-timeout gives a test


def _srun(cluster: Deployed, args: str) -> str:
    code, out = cluster.sh("login", f"cd ~ && srun {args}", user=USER, timeout=EMULATED)
    assert code == 0, f"srun {args} exited {code}:\n{out}"
    return out


def test_one_step_runs_on_both_arches_inside_the_jail(mixed: Deployed) -> None:
    out = _srun(mixed, "-N2 -l bash -c 'echo $(hostname) $(uname -m) $(id -un) $HOME'")
    assert _by_task(out) == [
        [f"cpu-0 x86_64 {USER} /home/{USER}"],
        [f"grace-0 aarch64 {USER} /home/{USER}"],
    ]


def _script(cluster: Deployed, name: str, text: str) -> None:
    cluster.ok("login", f"cat > ~/{name} << 'EOF'\n{text}\nEOF", user=USER)


def _by_task(out: str) -> list[list[str]]:
    """srun -l output: each task's lines, ordered by what they say (not by task number)."""
    tasks: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("srun: "):  # (srun's own: job queued, allocated)
            continue
        task, _, text = line.partition(": ")
        tasks.setdefault(task, []).append(text.strip())
    return sorted(tasks.values())


def test_each_arch_loads_its_own_cuda_and_nccl_through_the_jails_ld_cache(
    mixed: Deployed,
) -> None:
    """One /etc for both arches, but an ld cache per arch: each node finds the CUDA runtime and
    NCCL of its arch by SONAME, and they load and report the versions versions.yaml pins."""
    versions = load_versions(ROOT / "versions.yaml")
    nccl = versions.versions.release("nccl", None, CUDA)[0]
    major, minor, _ = (int(x) for x in CUDA.split("."))
    n = [int(x) for x in nccl.split(".")]
    want = [str(major * 1000 + minor * 10), str(n[0] * 10000 + n[1] * 100 + n[2])]
    _script(mixed, "probe.sh", PROBE)
    assert _by_task(_srun(mixed, "-N2 -l sh probe.sh")) == [
        ["libcudart.so.12 (libc6,AArch64)", *want],
        ["libcudart.so.12 (libc6,x86-64)", *want],
    ]


def test_an_mpi_job_spans_both_arches_and_is_accounted(mixed: Deployed) -> None:
    _script(mixed, "hello.c", HELLO)
    _script(mixed, "mixed.sh", JOB)
    code, out = mixed.sh(
        "login", "cd ~ && sbatch --parsable --wait mixed.sh", user=USER, timeout=EMULATED
    )
    job = out.split()[-1].split(";")[0] if out.split() else "?"
    if code != 0:  # once in a fresh run it ended 140: what the job and the nodes said
        said = mixed.sh(
            "login",
            f"cat ~/mixed-{job}.out; sacct -j {job} -P -o JobID,NodeList,State,ExitCode,Reason;"
            f" sinfo -R; sinfo -N; scancel {job}",  # not left holding the next test's nodes
            user=USER,
        )[1]
        raise AssertionError(f"sbatch --wait mixed.sh exited {code}: {out}\n{said}")
    output = mixed.ok("login", f"cat ~/mixed-{job}.out", user=USER).splitlines()
    # Open MPI's TCP transport may box a warning about a socket call that qemu-user answers
    # otherwise than a kernel would (F_GETFL: EAGAIN, a peer's address: EBADF): the emulated node
    # alone may say so, and the ranks still meet
    ranks = sorted(line for line in output if line.startswith("rank "))
    assert ranks == [
        "rank 0 of 2 on cpu-0 (x86_64): sum 1",
        "rank 1 of 2 on grace-0 (aarch64): sum 1",
    ], "\n".join(output)
    warned = {line.split(":", 1)[1].strip() for line in output if "Local host:" in line}
    assert warned <= {"grace-0"}, "\n".join(output)
    # each node built its own: an x86-64 and an AArch64 program side by side in the one home
    machines = [
        mixed.ok("login", f"od -An -tx1 -j18 -N1 ~/mixed/hello.{arch}", user=USER)
        for arch in ("x86_64", "aarch64")
    ]
    assert machines == ["3e", "b7"]  # EM_X86_64, EM_AARCH64
    sacct = mixed.ok("login", f"sacct -j {job} -n -P -o JobID,NodeList,State,ExitCode", user=USER)
    steps = {line.split("|")[0]: line.split("|")[1:] for line in sacct.splitlines()}
    assert steps[job] == ["cpu-0,grace-0", "COMPLETED", "0:0"], sacct
    assert steps[f"{job}.1"] == ["cpu-0,grace-0", "COMPLETED", "0:0"], sacct


def test_the_arm64_node_unpacks_an_arm64_image_with_its_own_enroot(
    mixed: Deployed, arm64_base: str, client: docker.DockerClient
) -> None:
    """A squashfs made from an arm64 image, unpacked on the arm64 node by its aarch64 enroot
    into the user's node-local container data: aarch64 programs inside, the image's own
    os-release. (Starting it needs a user namespace, which an emulated node cannot make; see
    the module's docstring.)"""
    sqsh = squashfs_image(mixed, {"base": arm64_base}, client, USER, "gracectr", "linux/arm64")
    _script(mixed, "unpack.sh", UNPACK.replace("SQSH", sqsh))
    mixed.ok("login", "rm -f ~/create.hung", user=USER)
    out = _srun(mixed, "-w grace-0 bash unpack.sh")
    code, hung = mixed.sh("login", "cat ~/create.hung", user=USER)
    if code == 0:
        warnings.warn(f"the emulated enroot create hung and was made again: {hung}", stacklevel=1)
    uid = mixed.ok("login", "id -u", user=USER)
    assert out.splitlines() == [
        "aarch64 armctr",
        f"/var/lib/slurmforge/enroot/{uid}/data",
        "b7",  # the ELF machine of its /usr/bin/ls: EM_AARCH64
        "ID=gracectr",
    ]
