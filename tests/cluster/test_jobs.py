"""What users run every day, on the default cluster, as they would on a plain Slurm cluster: MPI
across nodes (PMIx with the jail's Open MPI, PMI-2 with MPICH), a batch script that stages data
through /tmp for its steps, output files where the user looks for them, and a launch that fails
without holding its nodes."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.cluster.deployed import Deployed
from tests.cluster.helpers import HELLO

pytestmark = pytest.mark.cluster

NODE_STATE = "/var/lib/slurmforge/jobs"  # where a node keeps its jobs' /tmp (jail/spank)


def _write(cluster: Deployed, user: str, path: str, text: str) -> None:
    cluster.ok("login", f"cat > {path} << 'EOF'\n{text}\nEOF", user=user)


def _mpi_hello(cluster: Deployed, mpicc: str, srun: str, size: int) -> set[str]:
    """Build the MPI hello world in a user's home with ``mpicc`` and start it with ``srun``; the
    hosts its ranks ran on, after checking every rank reported the right allreduce."""
    cluster.user("mpiuser")
    _write(cluster, "mpiuser", "~/hello.c", HELLO)
    cluster.ok("login", f"cd ~ && {mpicc} -o hello hello.c", user="mpiuser")
    out = cluster.ok("login", f"cd ~ && {srun} ./hello", user="mpiuser")
    lines = re.findall(r"^rank (\d+) of (\d+) on (\S+) sum (\d+)$", out, re.M)
    assert sorted(int(r) for r, *_ in lines) == list(range(size)), out
    assert all(int(n) == size and int(s) == size * (size - 1) // 2 for _, n, _, s in lines), out
    return {host for _, _, host, _ in lines}


def _submitted(out: str) -> str:
    found = re.search(r"Submitted batch job (\d+)", out)
    assert found, out
    return found.group(1)


def test_mpi_hello_over_pmix_on_two_nodes_with_a_plain_srun(deployed: Deployed) -> None:
    # as a user, from their home, with the jail's own Open MPI and no --mpi flag (MpiDefault)
    assert _mpi_hello(deployed, "mpicc", "srun -N2 -n4 -O", 4) == {"cpu-0", "cpu-1"}


# MPICH 5.0.2, PyPI's build (ch4:ucx and ofi, its own UCX; relocatable), pinned by hash. Debian
# 12's MPICH 4.0.2 (ch4:ucx) can hang in MPI_Finalize: a rank that has flushed its UCX endpoints
# waits in a PMI barrier while its peer still waits for that rank's flush acknowledgement, which
# only a progressing rank sends (fixed upstream in MPICH 4.2, pmodels/mpich#6596).
MPICH = (
    "mpich==5.0.2 --hash=sha256:8fed465ebff269ea2ebac179a25de02671ddf8df476e0f115be089015015cfd4"
)
MPICH_RUNS = 30


def test_mpi_hello_over_pmi2_with_mpich_ends_every_time(deployed: Deployed, tmp_path: Path) -> None:
    """PMI-2 is what MPICH speaks: the docs' recipe (MPICH from PyPI in a venv, /opt/mpich, in the
    jail), then the hello world started again and again in one allocation; each step must end
    on its own (a finalize that hangs is killed by its time limit and fails the run)."""
    # the wheel comes through the host's pip (its index and certificates, as the image builds'
    # wheels do), hash-checked there and again by the jail's pip
    (tmp_path / "mpich.txt").write_text(MPICH + "\n")
    fetch = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes"]
    fetch += ["--only-binary=:all:", "--platform", "manylinux_2_28_x86_64"]
    fetch += ["-d", str(tmp_path), "-r", str(tmp_path / "mpich.txt")]
    subprocess.run(fetch, check=True, timeout=300)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for path in tmp_path.iterdir():
            tar.add(path, arcname=path.name)
    # through the login node's own view of the jail (its /tmp is mounted there at start)
    unpack = "mkdir -p /jail/tmp/mpich && tar -x -C /jail/tmp/mpich"
    login = deployed.container("login").id
    subprocess.run(
        ["docker", "exec", "-i", login, "bash", "-c", unpack],
        input=archive.getvalue(),
        check=True,
        timeout=60,
    )
    deployed.ok(
        "login",
        "apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv"
        " && python3 -m venv /opt/mpich && /opt/mpich/bin/pip install -q --no-deps"
        " --require-hashes --no-index --find-links /tmp/mpich -r /tmp/mpich/mpich.txt",
        user="root",
    )
    hosts = _mpi_hello(deployed, "/opt/mpich/bin/mpicc", "srun --mpi=pmi2 -N2 -n2", 2)
    assert hosts == {"cpu-0", "cpu-1"}
    loop = (
        f"for i in $(seq {MPICH_RUNS}); do"
        " srun --mpi=pmi2 -N2 -n2 -t 1 ./hello > /dev/null || echo failed run $i; done"
    )
    out = deployed.ok("login", f"cd ~ && salloc -N2 -t 10 bash -c '{loop}'", user="mpiuser")
    assert "failed run" not in out, out


def test_a_batch_script_stages_data_in_tmp_for_its_steps(deployed: Deployed) -> None:
    deployed.user("alice")
    script = (
        "#!/bin/bash\n"
        "echo staged-$SLURM_JOB_ID > /tmp/stage\n"
        "head -c 4096 /dev/zero > /dev/shm/segment\n"
        "srun cat /tmp/stage\n"
        # task 1 reads what task 0 writes, and both see the job's shared memory
        'srun -n2 -O bash -c \'if [ "$SLURM_PROCID" = 0 ]; then echo from-task-0 > /tmp/t0; fi;'
        " for i in $(seq 100); do [ -s /tmp/t0 ] && break; sleep 0.1; done;"
        ' echo "task $SLURM_PROCID: $(cat /tmp/t0) $(stat -c %s /dev/shm/segment)"\'\n'
    )
    _write(deployed, "alice", "~/stage.sh", script)
    out = deployed.ok(
        "login", "cd ~ && sbatch --wait -w cpu-0 -o stage.out -e stage.err stage.sh", user="alice"
    )
    job = _submitted(out)
    lines = deployed.ok("login", "cat ~/stage.out", user="alice").splitlines()
    # a step that waited for the one before it to release the job's memory says so on stderr
    err = deployed.ok("login", "cat ~/stage.err", user="alice").splitlines()
    assert all(ln.startswith("srun: Step created") for ln in err), err
    assert lines[0] == f"staged-{job}", lines
    assert sorted(lines[1:]) == ["task 0: from-task-0 4096", "task 1: from-task-0 4096"], lines
    # the next job on that node starts with an empty /tmp and /dev/shm of its own
    after = deployed.ok("login", "srun -w cpu-0 bash -c 'ls -A /tmp /dev/shm'", user="alice")
    assert "stage" not in after and "segment" not in after and "t0" not in after, after
    # and the node keeps nothing of either job once they have ended (the epilog removes them)
    deployed.wait_states({"cpu-0": "idle"})
    leftovers = f"find {NODE_STATE} /dev/shm/.slurmforge -mindepth 1"
    deadline = time.monotonic() + 30
    while (left := deployed.ok("cpu-0", leftovers)) and time.monotonic() < deadline:
        time.sleep(1)
    assert left == "", left
    assert deployed.ok("cpu-0", "ls -A /tmp") == "", "the node's own /tmp was written to"


def test_a_node_where_the_job_ran_nothing_keeps_nothing_either(deployed: Deployed) -> None:
    """The batch script runs on the first node alone; the second was only allocated. Its job
    epilog (pyxis lists the user's containers there, as the user, outside the jail) left
    /tmp/enroot-runtime-user-<uid> in that node's own /tmp (images/gpu/enroot.conf)."""
    deployed.user("nora")
    deployed.ok("login", "cd ~ && sbatch --wait -N2 -o /dev/null --wrap true", user="nora")
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"})  # the epilogs have run
    for node in ("cpu-0", "cpu-1"):
        assert deployed.ok(node, "ls -A /tmp") == "", f"{node}'s own /tmp was written to"


def test_jobs_of_other_users_do_not_share_tmp(deployed: Deployed) -> None:
    deployed.user("alice")
    deployed.user("bob")
    job = _submitted(
        deployed.ok(
            "login",
            "cd ~ && sbatch -w cpu-1 -o /dev/null --wrap 'echo secret > /tmp/mine; sleep 30'",
            user="alice",
        )
    )
    try:
        deadline = time.monotonic() + 30
        path = f"{NODE_STATE}/{job}/mine"
        while deployed.sh("cpu-1", f"test -s {path}")[0] and time.monotonic() < deadline:
            time.sleep(0.5)
        # the file is in the job's directory on the node, whose parent only root can enter
        assert deployed.ok("cpu-1", f"cat {path}") == "secret"
        assert deployed.ok("cpu-1", f"stat -c %a {NODE_STATE}") == "700"
        # bob's job on the other node, and bob on the login node, see nothing of it
        out = deployed.ok("login", "srun -w cpu-0 ls -A /tmp", user="bob")
        assert "mine" not in out
        assert deployed.sh("login", f"ls {path}", user="bob")[0] != 0
    finally:
        deployed.ok("login", f"scancel {job}", user="alice")


@pytest.mark.parametrize(
    ("user", "where"),
    [("alice", "~"), ("root", "/root"), ("alice", "/scratch/alice"), ("alice", "/var/tmp")],
)
def test_the_batch_output_file_is_where_the_user_submitted(
    deployed: Deployed, user: str, where: str
) -> None:
    if user != "root":
        deployed.user(user)
    deployed.ok("login", f"mkdir -p {where}", user=user)
    out = deployed.ok("login", f"cd {where} && sbatch --wait --wrap 'echo hi from $PWD'", user=user)
    job = _submitted(out)
    home = deployed.ok("login", "echo ~", user=user)
    path = where.replace("~", home, 1)
    # read back from the login node's own view of the shared volume, outside any job
    assert deployed.ok("login", f"cat /jail{path}/slurm-{job}.out") == f"hi from {path}"


def test_output_and_error_paths_resolve_in_the_jail(deployed: Deployed) -> None:
    deployed.user("alice")
    deployed.ok("login", "mkdir -p /scratch/alice/logs", user="alice")
    out = deployed.ok(
        "login",
        "cd ~ && sbatch --wait -o /scratch/alice/logs/%j.out -e /scratch/alice/logs/%j.err"
        " --wrap 'echo to-out; echo to-err >&2'",
        user="alice",
    )
    job = _submitted(out)
    assert deployed.ok("login", f"cat /jail/scratch/alice/logs/{job}.out") == "to-out"
    assert deployed.ok("login", f"cat /jail/scratch/alice/logs/{job}.err") == "to-err"


def test_sbatch_from_a_system_directory_is_refused_at_submit(deployed: Deployed) -> None:
    before = deployed.ok("slurmctld", "squeue -h -a | wc -l")
    code, out = deployed.sh("login", "cd /etc && sbatch --wrap true", user="root")
    assert code != 0, out
    assert "cannot submit from /etc" in out and "outside the jail" in out, out
    assert "Submitted batch job" not in out, out  # refused, not merely warned about
    assert deployed.ok("slurmctld", "squeue -h -a | wc -l") == before


def test_a_failed_launch_frees_its_nodes(deployed: Deployed) -> None:
    # the MPI plugin cannot make its client directory: the step fails to launch on both nodes
    deployed.user("alice")
    code, out = deployed.sh(
        "login", "SLURM_PMIX_TMPDIR=/nonexistent/dir srun -N2 true", user="alice", timeout=120
    )
    assert code != 0, out
    assert "launch failed" in out, out
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, timeout=30)
    # and the next job runs at once
    out = deployed.ok("login", "srun -N2 -t 1 hostname", user="alice")
    assert sorted(out.split()) == ["cpu-0", "cpu-1"]
