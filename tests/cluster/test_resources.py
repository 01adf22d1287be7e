"""Jobs get what they asked for and no more, as on a production Slurm cluster with cgroups:
memory is scheduled (a job that asks for more than a node has is refused, two that each need a
node's memory do not share it) and enforced (a step past --mem ends OUT_OF_MEMORY), tasks are
bound to their own CPUs, and nothing a job started outlives it. Nodes of 2 CPUs and 1 GiB."""

from __future__ import annotations

import re
import shlex
import time

import pytest

from tests.cluster.deployed import Clusters, Deployed
from tests.cluster.helpers import sacct, sbatch_wait

pytestmark = pytest.mark.cluster

USER = "resuser"
# writes every page of ``MB`` megabytes (untouched pages of a bare allocation would cost nothing)
ALLOCATE = "python3 -c \"x = bytearray({mb} << 20); x[::4096] = b'x' * len(x[::4096])\""


@pytest.fixture(scope="module")
def sized(images: dict[str, str], clusters: Clusters) -> Deployed:
    cluster = clusters.deploy(
        "sfres",
        clusters.root("resources"),
        nodesets=[
            {
                "name": "cpu",
                "definitions": ["cpu-small"],
                "replicas": 2,
                "cpus": 2,
                "memory_mb": 1024,
            }
        ],
        rest={"enabled": False},
    )
    cluster.user(USER)
    return cluster


def _submit(cluster: Deployed, options: str, script: str) -> str:
    """``sbatch --wait`` of ``script`` with ``options``; its job ID (whatever its exit)."""
    quoted = shlex.quote(script)
    out = cluster.sh("login", f"sbatch --parsable --wait {options} --wrap {quoted}", user=USER)[1]
    job = out.strip().splitlines()[0] if out.strip() else ""
    assert job.isdigit(), out
    return job


def test_a_job_past_its_memory_ends_out_of_memory(sized: Deployed) -> None:
    over = _submit(sized, "--mem=64M", ALLOCATE.format(mb=600))
    within = _submit(sized, "--mem=256M", ALLOCATE.format(mb=100))
    # a step of a batch job: the step is OUT_OF_MEMORY, the job FAILED with srun's exit
    step = _submit(sized, "--mem=256M", f"srun --mem=64M {ALLOCATE.format(mb=600)}")
    rows = sacct(sized, USER, [over, within, step])
    assert rows[over][0] == "OUT_OF_MEMORY", rows
    assert rows[within][0] == "COMPLETED", rows
    assert rows[step][0] == "FAILED", rows
    steps = sized.ok("login", f"sacct -n -P -j {step} -o JobID,State", user=USER)
    assert f"{step}.0|OUT_OF_MEMORY" in steps.splitlines(), steps


def test_more_memory_than_a_node_has_is_refused_at_submit(sized: Deployed) -> None:
    code, out = sized.sh("login", "sbatch --mem=2G --wrap true", user=USER)
    assert code != 0 and "Requested node configuration is not available" in out, out
    assert sized.ok("login", "squeue -h -u resuser", user=USER) == ""


def test_jobs_that_each_need_a_nodes_memory_do_not_share_it(sized: Deployed) -> None:
    submit = "sbatch --parsable -w cpu-0 -c1 --mem=1G --wrap 'sleep 60'"
    first = sized.ok("login", submit, user=USER)
    second = sized.ok("login", submit, user=USER)
    try:
        deadline = time.monotonic() + 30
        while sized.ok("login", f"squeue -h -j {first} -o %T", user=USER) != "RUNNING":
            assert time.monotonic() < deadline, "the first job did not start"
            time.sleep(1)
        # a CPU of cpu-0 is free, its memory is not (the reason is None until the scheduler
        # has looked at the job once since the first one started)
        state = sized.ok("login", f"squeue -h -j {second} -o '%T %r'", user=USER)
        while state == "PENDING None" and time.monotonic() < deadline + 15:
            time.sleep(1)
            state = sized.ok("login", f"squeue -h -j {second} -o '%T %r'", user=USER)
        assert state == "PENDING Resources", state
    finally:
        sized.ok("login", f"scancel {first} {second}", user=USER)


def test_a_job_without_mem_gets_its_partitions_memory_per_cpu(sized: Deployed) -> None:
    job = sbatch_wait(sized, USER, "true")
    shown = sized.ok("login", f"scontrol show job {job}", user=USER)
    assert re.search(r"\bMinMemoryCPU=512M\b", shown), shown  # 1024 MB over 2 CPUs


def test_two_one_cpu_tasks_are_bound_to_different_cpus(sized: Deployed) -> None:
    out = sized.ok(
        "login",
        # -Q: a job of the previous test may still hold the node ("queued and waiting")
        "srun -Q -N1 -n2 -c1 -w cpu-0 -l grep Cpus_allowed_list /proc/self/status",
        user=USER,
    )
    cpus = sorted(line.split()[-1] for line in out.splitlines())
    assert len(cpus) == 2 and all(c.isdigit() for c in cpus) and cpus[0] != cpus[1], out
    # the step's cgroup holds it to its one CPU, whatever it asks the kernel for
    assert sized.ok("login", "srun -Q -n1 -c1 nproc", user=USER) == "1"


def test_a_job_runs_in_cgroups_of_its_own(sized: Deployed) -> None:
    out = sized.ok("login", "srun -n1 -w cpu-1 cat /proc/self/cgroup", user=USER)
    lines = out.splitlines()
    # cgroup v1: the memory controller's line; v2: the one line there is
    line = next((ln for ln in lines if ":memory:" in ln), lines[-1])
    assert re.search(r"/job_\d+/step_0(/user)?/task_0$", line), out


def test_nothing_a_job_started_outlives_it(sized: Deployed) -> None:
    """A process that leaves its session and its parent (a daemon a user's script starts) is
    still the job's; it ends with the step, on every node, and with a batch job."""
    # each step says that its escaped process runs before the step ends (the positive control:
    # without it, processes that never started would pass as processes that were ended)
    escape = (
        "setsid bash -c 'sleep 4242 & disown' < /dev/null > /dev/null 2>&1; sleep 1; "
        "pgrep -a -x sleep | grep -q 4242 && echo escaped"
    )
    out = sized.ok("login", f'srun -Q -N2 bash -c "{escape}"', user=USER)
    assert out.split() == ["escaped", "escaped"], out
    job = sbatch_wait(sized, USER, escape.replace("4242", "4343").replace("'", "'\\''"))
    assert sized.ok("login", f"cat slurm-{job}.out", user=USER) == "escaped"
    for node in ("cpu-0", "cpu-1"):
        deadline = time.monotonic() + 20
        while True:
            left = sized.sh(node, "pgrep -af 'sleep (4242|4343)'")[1]
            if not left:
                break
            assert time.monotonic() < deadline, f"left on {node}: {left}"
            time.sleep(1)
