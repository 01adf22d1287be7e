"""Elastic node sets on the local target, as users meet them: nodes that exist only while jobs
need them. One cluster of two elastic sets: `burst` (0 to 3 nodes, partition burst, the
default) and `warm` (1 to 2 nodes: one always runs). Slurm's power saving decides when; the
node-power agent starts and stops the containers.

A 3-node job on the set at zero starts three nodes and runs on all three; idle nodes stop (their
containers exit, sinfo shows them powered down, the exporter counts them so) while warm's first
node stays; two multi-node jobs and an array of 20 submitted at once onto stopped nodes all
complete; a job larger than the set pends with Slurm's own reason; a job submitted while nodes
are stopping runs once they started again; a user's ssh to a node started for their job lands
in the job's cgroup (pam_slurm_adopt); a started node whose container stopped behind Slurm's
back, marked down for not answering, is started again by the next deploy; a node whose
container cannot start is marked down after its start timeout with the reason in `sinfo -R`
and the metrics, and its job is requeued and runs on another node; a job asking for a GPU of
the GPU set (on a synthetic driver root) starts its node and sees its one GPU and the driver,
read-only; and the cluster restored from a backup, on a host that lost it, runs the elastic
node that ran then and starts the others only when a job needs them."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest

from tests import driver_root
from tests.cluster.deployed import Deployed, invoke
from tests.cluster.helpers import OWN_SSH_KEY, sacct, scrape
from tests.common import until

pytestmark = pytest.mark.cluster

USER = "elastic"
IDLE = 30  # elastic.idle: SuspendTime
START = 45  # elastic.start_timeout: ResumeTimeout
BURST = ["burst-0", "burst-1", "burst-2"]
GPU, GPU_LIB = "trainer-0", "/usr/local/nvidia/lib64"
# stopped after IDLE, powered down once SuspendTimeout (30 s) has passed, checked every 10 s;
# about 75 s here, with room for a machine that also runs the k8s lane and a compile
STOPPED_WITHIN = IDLE + 30 + 120


@pytest.fixture(scope="module")
def cluster(clusters) -> Deployed:
    timers = {"idle": IDLE, "start_timeout": START}
    burst = {"name": "burst", "definitions": ["cpu-small"], "elastic": {"max": 3, **timers}}
    warm = {"name": "warm", "definitions": ["cpu-small"], "elastic": {"min": 1, "max": 2, **timers}}
    # a GPU worker that runs only for jobs, on a synthetic driver root (tests/driver_root.py)
    gpus = {"name": "trainer", "definitions": ["gpu"], "cpus": 1, "memory_mb": 1024,
            "elastic": {"max": 1, **timers}}  # fmt: skip
    root = clusters.root("elastic")
    host = driver_root.make(root / "host", gpus=2)
    deployed = clusters.deploy(
        "sfel",
        root,
        gpu={"driver_root": str(host)},
        nodesets=[burst, warm, gpus],
        partitions=[
            {"name": "burst", "nodesets": ["burst"], "default": True},
            {"name": "warm", "nodesets": ["warm"]},
            {"name": "gpu", "nodesets": ["trainer"]},
        ],
    )
    deployed.user(USER)
    return deployed


def _status(cluster: Deployed, node: str) -> str:
    container = cluster.container(node)
    container.reload()
    return container.status


def _states(cluster: Deployed) -> dict[str, str]:
    return cluster.states()


def _submit(cluster: Deployed, options: str) -> str:
    return cluster.ok("login", f"cd && sbatch --parsable {options}", user=USER).split(";")[0]


def _metrics(cluster: Deployed) -> str:
    return cluster.ok("exporter", scrape(9341))


def _seen(cluster: Deployed, nodes: list[str]) -> str:
    """What Slurm and Docker say of ``nodes``, for a failure's message."""
    states = _states(cluster)
    return ", ".join(f"{n} {states.get(n)}/{_status(cluster, n)}" for n in nodes)


def _powered_down(cluster: Deployed, nodes: list[str]) -> bool:
    states = _states(cluster)
    return all(states.get(n) == "idle~" for n in nodes) and all(
        _status(cluster, n) != "running" for n in nodes
    )


def test_the_deploy_starts_only_the_nodes_that_always_run(cluster: Deployed) -> None:
    assert _states(cluster) == {
        **dict.fromkeys([*BURST, "warm-1", GPU], "idle~"),
        "warm-0": "idle",
    }
    assert _status(cluster, "warm-0") == "running"
    # made by the deploy, started by Slurm
    assert {_status(cluster, n) for n in [*BURST, "warm-1", GPU]} == {"created"}


def test_a_three_node_job_on_a_set_at_zero_starts_three_nodes_and_runs(cluster: Deployed) -> None:
    start = time.monotonic()
    job = _submit(cluster, "-N3 -o n3.out --wrap 'srun hostname | sort'")
    assert sacct(cluster, USER, [job], timeout=180)[job][0] == "COMPLETED"
    took = time.monotonic() - start
    assert cluster.ok("login", "cat ~/n3.out", user=USER).split() == BURST
    assert all(_status(cluster, n) == "running" for n in BURST)
    assert took < START + 60, f"{took:.0f} s"


def test_idle_nodes_stop_and_count_as_powered_down(cluster: Deployed) -> None:
    until(
        "the burst nodes powered down",
        lambda: _powered_down(cluster, BURST),
        STOPPED_WITHIN,
        detail=lambda: _seen(cluster, BURST),
    )
    # warm keeps its one node up, however long it is idle
    assert _states(cluster)["warm-0"] == "idle" and _status(cluster, "warm-0") == "running"
    text = _metrics(cluster)
    for node in BURST:
        assert f'slurm_node_state{{node="{node}",state="powered_down"}} 1.0' in text, text


def test_the_node_power_agent_restarted_still_starts_nodes(cluster: Deployed) -> None:
    """The agent's request directory outlives its container (a volume, slurm's once the agent
    first started): restarted, as an engine restart or an upgrade's new container starts it, it
    is ready again, and a job on a stopped node runs. (Before, it took the directory back with a
    chmod it may not make on slurm's file, and restarted for ever: nothing started.)"""
    agent = cluster.container("node-power")
    agent.restart()
    until("the agent running and ready again", lambda: cluster.container("node-power").status
          == "running" and cluster.container("node-power").logs(tail=5).count(b"ready:") > 0
          and b"Traceback" not in cluster.container("node-power").logs(tail=20), 60)  # fmt: skip
    time.sleep(3)  # a restart loop would show by now
    agent.reload()
    assert agent.status == "running" and agent.attrs["RestartCount"] == 0, agent.attrs["State"]
    job = _submit(cluster, "-N1 -o /dev/null --wrap true")
    assert sacct(cluster, USER, [job], timeout=180)[job][0] == "COMPLETED"


def test_jobs_racing_for_stopped_nodes_and_an_array_of_20_all_complete(
    cluster: Deployed,
) -> None:
    first = _submit(cluster, "-N2 -o /dev/null --wrap 'srun sleep 2'")
    second = _submit(cluster, "-N2 -o /dev/null --wrap 'srun sleep 2'")
    array = _submit(cluster, "--array=0-19 -o /dev/null --wrap 'sleep 1'")
    rows = sacct(cluster, USER, [first, second], timeout=300)
    assert (rows[first][0], rows[second][0]) == ("COMPLETED", "COMPLETED"), rows

    def tasks() -> dict[str, str]:
        out = cluster.ok("login", f"sacct -n -P -X -j {array} -o JobID,State", user=USER)
        return dict(line.split("|") for line in out.splitlines())

    until("the array's 20 tasks ended", lambda: len(tasks()) == 20 and all(
        s not in ("PENDING", "RUNNING") for s in tasks().values()), 300)  # fmt: skip
    assert set(tasks().values()) == {"COMPLETED"}, tasks()


def test_a_job_larger_than_the_set_pends_with_slurms_reason(cluster: Deployed) -> None:
    job = _submit(cluster, "-N4 -o /dev/null --wrap true")
    try:
        time.sleep(5)
        shown = cluster.ok("login", f"squeue -h -j {job} -o '%T %r'", user=USER)
        state, reason = shown.split(maxsplit=1)
        assert state == "PENDING" and reason not in ("None", ""), shown
    finally:
        cluster.ok("login", f"scancel {job}", user=USER)


def test_a_gpu_node_started_for_a_job_has_its_own_gpu_and_the_driver_read_only(
    cluster: Deployed,
) -> None:
    """The GPU set at zero: a job asking for a GPU starts its node, and in the jail there the
    job sees the one GPU it was given and loads the host's driver, mounted read-only."""
    probe = (
        "hostname; test -r /etc/slurmforge-jail-release && echo in-jail; "
        "ls /dev | grep -E '^nvidia[0-9]+$'; echo visible=$CUDA_VISIBLE_DEVICES; "
        f"touch {GPU_LIB}/new 2>&1 || true; "
        "python3 -c 'import ctypes; v=ctypes.c_int(); "
        'ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)); print("api", v.value)\''
    )
    out = cluster.ok(
        "login", f"srun -Q -p gpu --gres=gpu:1 -t 5 bash -c {shlex.quote(probe)}", user=USER
    )
    lines = out.splitlines()
    assert lines[:4] == [GPU, "in-jail", "nvidia0", "visible=0"], out
    assert "Read-only file system" in lines[4], out
    assert lines[5] == f"api {driver_root.CUDA_DRIVER_API}", out
    assert _status(cluster, GPU) == "running"
    # the worker's container holds the host's GPU 0 alone; a CPU node's holds no device
    mounts = cluster.client.api.inspect_container(cluster.container(GPU).id)["HostConfig"]
    assert [d["PathOnHost"].rsplit("/", 1)[-1] for d in mounts["Devices"] or []
            if re.fullmatch(r".*/nvidia[0-9]+", d["PathOnHost"])] == ["nvidia0"]  # fmt: skip
    burst = cluster.client.api.inspect_container(cluster.container("burst-0").id)["HostConfig"]
    assert not burst["Devices"], burst["Devices"]


def test_a_job_submitted_while_nodes_stop_runs_once_they_start_again(cluster: Deployed) -> None:
    until("a burst node stopping", lambda: any(
        _states(cluster)[n] in ("idle%", "idle~") for n in BURST), STOPPED_WITHIN)  # fmt: skip
    job = _submit(cluster, "-N3 -o /dev/null --wrap 'srun true'")
    assert sacct(cluster, USER, [job], timeout=240)[job][0] == "COMPLETED"


def test_ssh_to_a_started_node_of_ones_job_lands_in_its_cgroup(cluster: Deployed) -> None:
    """pam_slurm_adopt on a node Slurm started for the job: the user's ssh lands in the job's
    extern step; on a node where they have no job, it is refused."""
    cluster.ok("login", OWN_SSH_KEY, user=USER)
    job = _submit(cluster, "-w burst-1 -t 5 -o /dev/null --wrap 'sleep 300'")
    try:
        until("the job running on burst-1", lambda: cluster.ok(
            "login", f"squeue -h -j {job} -o %T", user=USER) == "RUNNING", START + 30)  # fmt: skip
        hop = "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
        # LogLevel=ERROR: without the notice that the node's key was added
        out = cluster.ok(
            "login", f"{hop} -o LogLevel=ERROR burst-1 'hostname; cat /proc/self/cgroup'", user=USER
        )
        host, *cgroups = out.splitlines()
        assert host == "burst-1", out
        assert any(f"/job_{job}/step_extern" in line for line in cgroups), out
        code, refused = cluster.sh("login", f"{hop} warm-0 true", user=USER)
        assert code != 0 and "Access denied by pam_slurm_adopt" in refused, refused
    finally:
        cluster.ok("login", f"scancel {job}", user=USER)


def test_a_started_node_whose_container_stopped_is_started_again_by_the_next_deploy(
    cluster: Deployed,
) -> None:
    """A node Slurm started for a job whose container then stopped out of Slurm's hands (a host
    reboot, `docker stop`): slurmctld marks it down for not answering, and Slurm's power saving
    leaves a down node as it is. The next deploy starts it, and it registers back into service.
    (A restore slower than SlurmdTimeout leaves its node the same way.)"""
    job = _submit(cluster, "-w burst-2 --no-requeue -o /dev/null --wrap 'sleep 600'")
    until("the job running on burst-2", lambda: cluster.ok(
        "slurmctld", f"squeue -h -j {job} -o %T").strip() == "RUNNING", START + 60)  # fmt: skip
    cluster.container("burst-2").stop(timeout=5)
    # SlurmdTimeout (60 s), noticed at the next ping
    until("burst-2 down for not answering", lambda: cluster.ok(
        "slurmctld", "sinfo -h -n burst-2 -o '%t|%E'") == "down*|Not responding",
        STOPPED_WITHIN)  # fmt: skip
    proc = cluster.invoke("deploy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: starting burst-2: Slurm has them powered up" in proc.stderr, proc.stderr
    assert _status(cluster, "burst-2") == "running"
    assert _states(cluster)["burst-2"] in ("idle", "mix", "alloc"), _seen(cluster, BURST)
    job = _submit(cluster, "-w burst-2 -o /dev/null --wrap 'hostname'")
    assert sacct(cluster, USER, [job], timeout=240)[job][0] == "COMPLETED"


def test_a_node_that_cannot_start_is_down_and_its_job_runs_elsewhere(cluster: Deployed) -> None:
    until(
        "the burst nodes powered down",
        lambda: _powered_down(cluster, BURST),
        STOPPED_WITHIN,
        detail=lambda: _seen(cluster, BURST),
    )
    cluster.container("burst-0").remove(force=True)  # nothing the agent can start
    job = _submit(cluster, "-N1 -o /dev/null --wrap 'hostname'")

    def attempts() -> list[str]:
        """Each run of the job: State|NodeList (sacct -D keeps the requeued one's record)."""
        out = cluster.ok("login", f"sacct -D -X -n -P -j {job} -o State,NodeList", user=USER)
        return out.splitlines()

    # Slurm requeues it onto another node, where it starts once its first launch credential
    # has expired (121 s: src/slurmctld/job_mgr.c)
    until("the job done on another node", lambda: attempts()[-1:] in (
        ["COMPLETED|burst-1"], ["COMPLETED|burst-2"]), START + 240)  # fmt: skip
    assert attempts()[0] in ("NODE_FAIL|burst-0", "REQUEUED|burst-0"), attempts()
    reasons = cluster.ok("slurmctld", "sinfo -R -h -o '%N|%E'")
    assert "burst-0|ResumeTimeout reached" in reasons.splitlines(), reasons
    # and its start withdrawn (ResumeFailProgram): the agent was asked to stop it, and found
    # nothing to stop
    agent = cluster.container("node-power").logs().decode(errors="replace")
    assert "suspend burst-0: no container (deploy the cluster again)" in agent, agent[-2000:]
    text = _metrics(cluster)
    assert re.search(r'slurm_node_state\{node="burst-0",state="(down|not_responding)"\} 1.0',
                     text), text  # fmt: skip


def test_a_restored_cluster_runs_the_elastic_nodes_that_ran_and_starts_the_others_for_jobs(
    cluster: Deployed, tmp_path: Path
) -> None:
    """The host lost and the cluster restored from a backup taken while one elastic node ran a
    job and the others were stopped: the one that ran runs again and is in service, the
    stopped ones come back powered down, warm's first node runs, and a job starts the rest."""
    # burst-0 back in service as the how-to says, its container still gone (above): resume
    # alone leaves it waiting to register (NOT_RESPONDING), which a restarted slurmctld never
    # gives a job; powered down again, it is an idle node at rest
    if _states(cluster)["burst-0"].startswith("down"):
        cluster.ok("slurmctld", "scontrol update nodename=burst-0 state=resume")
        cluster.ok("slurmctld", "scontrol update nodename=burst-0 state=power_down")
    until("the burst nodes powered down", lambda: all(
        _states(cluster)[n] == "idle~" for n in BURST), STOPPED_WITHIN)  # fmt: skip
    # burst-1 (burst-0's container is gone: the test above) started for a job that is still
    # running when the backup is taken
    held = _submit(cluster, "-w burst-1 --no-requeue -o /dev/null --wrap 'sleep 600'")
    until("burst-1 running its job", lambda: cluster.ok(
        "slurmctld", f"squeue -h -j {held} -o %T").strip() == "RUNNING", START + 60)  # fmt: skip
    proc = invoke(
        cluster.env, "backup", "--cluster", str(cluster.cluster_file), "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (archive,) = tmp_path.glob("*.tar")
    proc = cluster.invoke("down", "--volumes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = cluster.invoke("restore", str(archive))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: starting burst-1: Slurm has them powered up" in proc.stderr, proc.stderr
    states = _states(cluster)
    stopped = ["burst-0", "burst-2", "warm-1"]
    assert {n: states[n] for n in [*stopped, "warm-0"]} == {
        **dict.fromkeys(stopped, "idle~"),
        "warm-0": "idle",
    }, states
    assert states["burst-1"] in ("idle", "alloc", "mix", "comp"), states
    assert {n: _status(cluster, n) for n in [*stopped, "burst-1"]} == {
        **dict.fromkeys(stopped, "created"),
        "burst-1": "running",
    }
    # the job that ran at the backup has no process left, but Slurm counts it as running until
    # burst-1 next registers (the elastic how-to: about 7 minutes); its user cancels it
    cluster.ok("login", f"scancel {held}", user=USER)
    job = _submit(cluster, "-N3 -o /dev/null --wrap 'srun true'")
    try:
        assert sacct(cluster, USER, [job], timeout=240)[job][0] == "COMPLETED"
    except BaseException:
        _explain(cluster)
        raise


def _explain(cluster: Deployed) -> None:
    """What the queue, Slurm's nodes and the node-power agent say: printed, for a failure."""
    print(cluster.sh("slurmctld", "squeue -o '%i %T %r %N'; sinfo -N -o '%N %t %E'")[1])
    for node in BURST:
        print(node, _status(cluster, node))
    print(cluster.container("node-power").logs(tail=40).decode(errors="replace"))
    print(cluster.container("slurmctld").logs(tail=60).decode(errors="replace"))
