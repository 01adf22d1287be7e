"""A node lost under a running job, on the default cluster, as a real cluster loses one: its
container killed (the restart policy brings it back) or stopped for good. The job ends NODE_FAIL
with a reason the user can read, or is requeued and runs again when it allows requeue; the node
is back in service within 60 s of its restart, and the next job runs. Then the planned kind: a
deploy that changes the nodes' definition takes them one at a time, after their jobs, and no job
ends as a lost node's."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.cluster.deployed import Deployed
from tests.cluster.helpers import sacct
from tests.common import dump_yaml, load_yaml

pytestmark = pytest.mark.cluster

USER = "lossuser"


def _running(cluster: Deployed, options: str, script: str) -> str:
    """A 2-node batch job of ``script``, once it runs on both nodes; its ID."""
    cluster.user(USER)
    job = cluster.ok(
        "login", f"cd ~ && sbatch --parsable -N2 {options} --wrap '{script}'", user=USER
    )
    deadline = time.monotonic() + 60
    while True:
        # the step runs on both nodes (srun's processes have started everywhere)
        steps = cluster.ok("login", f"squeue -h -s -j {job} -o '%i %N'", user=USER)
        if f"{job}.0 cpu-[0-1]" in steps.splitlines():
            return job
        assert time.monotonic() < deadline, f"job {job} did not start its step: {steps}"
        time.sleep(1)


def _kill(cluster: Deployed, node: str) -> float:
    """SIGKILL a node container's init, as the kernel's OOM killer or a crash would; when the
    restart policy has it running again."""
    container = cluster.container(node)
    restarts = container.attrs["RestartCount"]
    os.kill(container.attrs["State"]["Pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        container.reload()
        if container.attrs["RestartCount"] > restarts and container.status == "running":
            return time.monotonic()
        assert time.monotonic() < deadline, f"{node} was not restarted: {container.status}"
        time.sleep(0.2)


def _job_state(cluster: Deployed, job: str) -> dict[str, str]:
    shown = cluster.ok("slurmctld", f"scontrol -o show job {job}")
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def _ended(cluster: Deployed, job: str) -> bool:
    """The job has its final state (COMPLETING: its epilogs still run)."""
    active = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED")
    return _job_state(cluster, job)["JobState"] not in active


def _wait_until(what: str, check, timeout: float = 90) -> float:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.5)
    return time.monotonic()


def _both_idle(cluster: Deployed) -> bool:
    states = cluster.states()
    return states.get("cpu-0") == "idle" and states.get("cpu-1") == "idle"


def test_a_node_killed_under_a_job_ends_it_node_fail(deployed: Deployed) -> None:
    job = _running(deployed, "--no-requeue", "srun sleep 600")
    restarted = _kill(deployed, "cpu-0")
    _wait_until("the job ended", lambda: _ended(deployed, job))
    shown = _job_state(deployed, job)
    assert shown["JobState"] == "NODE_FAIL" and shown["Reason"] == "NodeDown", shown
    idle = _wait_until("both nodes idle", lambda: _both_idle(deployed))
    assert idle - restarted < 60
    assert sacct(deployed, USER, [job])[job][0] == "NODE_FAIL"
    # the node said why it went down
    events = deployed.ok("slurmctld", "sacctmgr -n -P show event nodes=cpu-0 format=reason")
    assert "node restarted; the processes of jobs" in events, events
    # the step's processes on the node that stayed up were ended with the job
    _wait_until("no sleep left", lambda: not deployed.sh("cpu-1", "pgrep -f '[s]leep 600'")[1])
    assert sorted(deployed.ok("login", "srun -N2 hostname", user=USER).split()) == [
        "cpu-0",
        "cpu-1",
    ]


def test_a_requeueable_job_runs_again_and_completes(deployed: Deployed) -> None:
    # the first run waits to be lost; the second (SLURM_RESTART_COUNT=1) finishes
    script = (
        "echo run ${SLURM_RESTART_COUNT:-0} >> ~/requeue-$SLURM_JOB_ID.out; "
        '[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] || srun sleep 600'
    )
    job = _running(deployed, "--requeue -o /dev/null", script)
    _kill(deployed, "cpu-1")

    def ran_again() -> bool:
        shown = _job_state(deployed, job)
        return shown["Restarts"] == "1" and _ended(deployed, job)

    _wait_until("the requeued job ended", ran_again, timeout=240)
    assert _job_state(deployed, job)["JobState"] == "COMPLETED"
    # sacct keeps both runs: the lost one and the one that completed
    runs = deployed.ok("login", f"sacct -n -P -X -D -j {job} -o State", user=USER).split()
    assert runs == ["NODE_FAIL", "COMPLETED"], runs
    runs = deployed.ok("login", f"cat ~/requeue-{job}.out", user=USER).splitlines()
    assert runs == ["run 0", "run 1"], runs
    _wait_until("both nodes idle", lambda: _both_idle(deployed))


def test_a_node_that_does_not_come_back_is_down_after_slurmd_timeout(deployed: Deployed) -> None:
    job = _running(deployed, "--no-requeue", "srun sleep 600")
    container = deployed.container("cpu-1")
    container.stop(timeout=0)  # stopped for good: no restart
    try:
        # SlurmdTimeout=60, and up to a ping interval more
        _wait_until("the job ended", lambda: _ended(deployed, job), timeout=150)
        shown = _job_state(deployed, job)
        if shown["JobState"] == "FAILED":
            # srun may see its connection to the lost node's slurmstepd fail before slurmctld
            # gives up on the node, and end the step itself (Slurm's step_launch.c), as on any
            # cluster: then the job's output says so
            out = deployed.ok("login", f"cat ~/slurm-{job}.out", user=USER)
            assert "io error with slurmstepd on node 1" in out, out
        else:
            assert shown["JobState"] == "NODE_FAIL", shown
        _wait_until(
            "cpu-1 down", lambda: deployed.states()["cpu-1"].startswith("down"), timeout=150
        )
    finally:
        container.start()
    _wait_until("both nodes idle", lambda: _both_idle(deployed), timeout=60)


def _in_queue(cluster: Deployed, job: str) -> bool:
    return bool(cluster.ok("slurmctld", f"squeue -h -t RUNNING -j {job} -o %i"))


def test_a_deploy_that_changes_the_nodes_replaces_them_after_their_jobs(
    deployed: Deployed,
) -> None:
    deployed.user(USER)
    # on cpu-0 a batch job past max_wait: requeued under its ID, its second run completes; on
    # cpu-1 an interactive step, which cannot be requeued: cancelled, its srun told why
    script = "echo run ${SLURM_RESTART_COUNT:-0}; [ ${SLURM_RESTART_COUNT:-0} -ge 1 ] || sleep 600"
    options = "-w cpu-0 --requeue --open-mode=append -o roll-%j.out"
    batch = deployed.ok(
        "login", f"cd ~ && sbatch --parsable {options} --wrap '{script}'", user=USER
    )
    deployed.ok(
        "login", "cd ~ && (setsid srun -w cpu-1 sleep 600 > roll-srun.out 2>&1 < /dev/null &)",
        user=USER,
    )  # fmt: skip
    listed = "squeue -h -t RUNNING -u lossuser -o '%i %j' | awk '$2 == \"sleep\" {print $1}'"
    _wait_until("the srun runs", lambda: bool(deployed.ok("slurmctld", listed)))
    interactive = deployed.ok("slurmctld", listed)
    _wait_until("the batch job runs", lambda: _in_queue(deployed, batch))
    before = {node: deployed.container(node).id for node in ("cpu-0", "cpu-1")}

    data = load_yaml(deployed.cluster_file.read_text())
    data["nodesets"][0]["env"] = {"SLURMFORGE_ROLLED": "1"}
    data["disruption"] = {"max_wait": "15s"}
    deployed.cluster_file.write_text(dump_yaml(data, sort_keys=False))
    done = deployed.invoke("deploy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"cpu-0: job {batch} requeued" in done.stderr, done.stderr
    assert f"cpu-1: job {interactive} cancelled" in done.stderr, done.stderr

    for node in ("cpu-0", "cpu-1"):  # made again, with the new definition, and in service
        assert deployed.container(node).id != before[node]
        assert deployed.ok(node, "printenv SLURMFORGE_ROLLED") == "1"
    # the batch job is the same job, run again to its end; nothing ended as on a lost node
    ended = sacct(deployed, USER, [batch, interactive], timeout=240)
    assert ended[batch][0] == "COMPLETED", ended
    assert ended[interactive][0].startswith("CANCELLED"), ended  # "CANCELLED by 0"
    assert _job_state(deployed, batch)["Restarts"] == "1"
    runs = deployed.ok("login", f"sacct -n -P -X -D -j {batch} -o State", user=USER)
    assert runs.split() == ["REQUEUED", "COMPLETED"], runs
    out = deployed.ok("login", f"cat ~/roll-{batch}.out", user=USER).splitlines()
    assert [line for line in out if line.startswith("run")] == ["run 0", "run 1"], out
    assert any(line.endswith("DUE TO JOB REQUEUE ***") for line in out), out  # Slurm's word
    told = deployed.ok("login", "cat ~/roll-srun.out", user=USER)
    assert "node cpu-1 is taken (deploy replaces it)" in told, told
    _wait_until("both nodes idle", lambda: _both_idle(deployed))
