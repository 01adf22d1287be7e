"""End to end on a deployed cluster: jobs and SSH sessions run in the shared jail, daemons stay
out of it, state survives restarts, nodes come back, scale, the munge key, bad deploy input."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.cluster.deployed import Deployed, invoke, write_cluster
from tests.cluster.helpers import clean_failure
from tests.common import ROOT, dump_yaml, load_yaml, until
from tests.ports import free_port

pytestmark = pytest.mark.cluster


def test_srun_across_two_nodes(deployed: Deployed) -> None:
    # idle (a job of a module run before this one may still be completing for a moment)
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, timeout=30)
    assert set(deployed.states()) == {"cpu-0", "cpu-1"}
    out = deployed.ok("login", "srun -N2 hostname", user="root")
    assert sorted(out.split()) == ["cpu-0", "cpu-1"]


def test_batch_job_runs_in_the_jail_and_writes_home(deployed: Deployed) -> None:
    deployed.user("alice")
    uid = deployed.ok("login", "id -u", user="alice")
    script = (
        "#!/bin/bash\nhostname > where; id -u >> where; cat /etc/slurmforge-jail-release >> where\n"
    )
    deployed.ok("login", f"cd ~ && printf '%s' {shlex.quote(script)} > job.sh", user="alice")
    deployed.ok("login", "cd ~ && sbatch --wait -o job.out job.sh", user="alice")
    # seen from the login node's own filesystem view of the shared volume
    where = deployed.ok("login", "cat /jail/home/alice/where").splitlines()
    assert where[0] in ("cpu-0", "cpu-1")
    assert where[1] == uid != "0"
    assert where[2].startswith("slurm=")  # a file that exists only in the jail image
    assert deployed.ok("login", "/opt/quickcheck/hello.sh", user="alice").endswith("quickcheck: ok")


def test_invoke_login_lands_in_the_jail(deployed: Deployed) -> None:
    deployed.user("alice")
    proc = deployed.invoke("login", "--user", "alice", stdin="id -un; pwd; sinfo -h -o %t\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["alice", "/home/alice", "idle"]


def test_every_sshd_serves_the_one_host_key_the_populate_made(deployed: Deployed) -> None:
    """The cluster's host keys are the jail's, made once by its populate: the login node and
    each node's sshd serve that key, so a user's known_hosts entry holds for every one."""
    made = deployed.ok("login", "cut -d' ' -f2 /jail/etc/ssh/ssh_host_ed25519_key.pub")
    for host in ("localhost", "cpu-0", "cpu-1"):
        served = deployed.ok("login", f"ssh-keyscan -T 10 -t ed25519 {host} 2>/dev/null")
        assert served.split()[-1] == made, (host, served)


def test_package_installed_from_login_runs_in_a_job(deployed: Deployed) -> None:
    deployed.user("alice")
    build = (
        "set -e; d=$(mktemp -d); mkdir -p $d/pkg/DEBIAN $d/pkg/usr/local/bin;"
        " printf 'Package: sf-hello\\nVersion: 1.0\\nArchitecture: all\\n"
        "Maintainer: t <t@t>\\nDescription: test\\n' > $d/pkg/DEBIAN/control;"
        " printf '#!/bin/sh\\necho hello-from-package\\n' > $d/pkg/usr/local/bin/sf-hello;"
        " chmod 755 $d/pkg/usr/local/bin/sf-hello;"
        " dpkg-deb --root-owner-group --build $d/pkg $d/sf-hello.deb >/dev/null;"
        " dpkg -i $d/sf-hello.deb >/dev/null"
    )
    deployed.ok("login", build, user="root")
    out = deployed.ok("login", "srun -N1 -w cpu-1 sf-hello", user="alice")
    assert out == "hello-from-package"


def test_a_job_cannot_see_or_kill_slurmd(deployed: Deployed) -> None:
    deployed.user("alice")
    pid = deployed.ok("cpu-0", "pidof slurmd")
    probe = (
        "test -e /usr/sbin/slurmd && echo slurmd-binary-visible;"
        " test -e /etc/munge/munge.key && echo munge-key-visible;"
        " test -e /etc/slurm/cgroup.conf && echo daemon-config-visible;"
        # the spool shows this step's own PMIx server directory and nothing else (an srun step
        # has no batch script directory)
        ' ls /var/spool/slurmd | grep -v -x "pmix.$SLURM_JOB_ID.$SLURM_STEP_ID" ;'
        f" test -e /proc/{pid} && echo slurmd-process-visible;"
        f" kill -0 {pid} 2>/dev/null && echo slurmd-killable;"
        " ps -eo user= | sort -u | tr '\\n' ' '"
    )
    out = deployed.ok("login", f"srun -N1 -w cpu-0 bash -c {shlex.quote(probe)}", user="alice")
    assert out.split() == ["alice"], out  # nothing of the node, only the user's own processes
    code, _ = deployed.sh("cpu-0", f"kill -0 {pid}")
    assert code == 0  # slurmd is alive and well, outside


def test_munge_key_is_reused_on_redeploy(deployed: Deployed) -> None:
    """(That no image layer holds a munge key is checked on every image in the image tier.)"""
    key = os.path.join(deployed.env["SLURMFORGE_STATE_DIR"], deployed.name, "munge.key")
    with open(key, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    assert os.stat(key).st_mode & 0o777 == 0o400
    assert os.path.getsize(key) == 1024
    proc = deployed.invoke("deploy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(key, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == digest
    for service in ("slurmctld", "cpu-0", "login"):
        assert deployed.ok(service, "sha256sum /etc/munge/munge.key").split()[0] == digest
    assert deployed.ok("login", "srun -N2 true && echo fine", user="root") == "fine"


def test_a_redeploy_leaves_an_operators_drain_and_says_so(deployed: Deployed) -> None:
    deployed.ok("slurmctld", "scontrol update NodeName=cpu-1 State=DRAIN Reason='disk swap'")
    try:
        proc = deployed.invoke("deploy", "--timeout", "60")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "note: cpu-1 stays drained (disk swap)" in proc.stderr
        assert deployed.ok("slurmctld", "sinfo -h -N -n cpu-1 -o '%t|%E'") == "drain|disk swap"
        assert deployed.ok("login", "srun -N1 hostname", user="root") == "cpu-0"
    finally:
        deployed.sh("slurmctld", "scontrol update NodeName=cpu-1 State=RESUME")
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"})


def _slurmd_started(deployed: Deployed, node: str) -> str:
    out = deployed.ok("slurmctld", f"scontrol show node {node} -o")
    return re.search(r"SlurmdStartTime=(\S+)", out).group(1)


def _registered_again(deployed: Deployed, node: str, before: str) -> None:
    """Until the node's slurmd, started again, has registered, Slurm still has the node idle
    from before: an srun sent there meanwhile meets the restart ("Node failure on cpu-1"), as on
    any Slurm cluster (two fresh CI runs met it)."""
    until(f"{node}'s slurmd registered again",
          lambda: _slurmd_started(deployed, node) != before, 120)  # fmt: skip


def _job(deployed: Deployed, command: str, job: str) -> str:
    """The job's state as squeue or sacct has it."""
    argv = {"squeue": f"squeue -h -j {job} -o %T", "sacct": f"sacct -n -P -X -j {job} -o State"}
    return deployed.ok("slurmctld", argv[command])


def test_a_redeploy_after_its_directory_was_deleted_gives_the_containers_the_new_one(
    deployed: Deployed,
) -> None:
    """A new checkout at the same path, or a deleted manifest directory: the running containers
    still hold the deleted one. A deploy that called them up to date left a node that restarted
    later (the host's reboot) without a slurm.conf, down for good (CI met it). A job running
    then ends as it would have: its node, which could no longer read a slurm.conf to ask
    slurmctld about its jobs, was replaced under it (NODE_FAIL) in a user's trial."""
    job = deployed.ok(
        "login", "sbatch --parsable -w cpu-0 -o /dev/null --wrap 'sleep 25'", user="root"
    )
    until("the job running", lambda: _job(deployed, "squeue", job) == "RUNNING", 60)
    shutil.rmtree(deployed.root / "out" / "local" / deployed.name)
    proc = deployed.invoke("deploy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    until("the job's end", lambda: _job(deployed, "sacct", job) not in ("", "RUNNING"), 90)
    state = _job(deployed, "sacct", job)
    assert state == "COMPLETED", f"{state}\n{proc.stderr}"
    before = _slurmd_started(deployed, "cpu-1")
    deployed.container("cpu-1").restart()
    _registered_again(deployed, "cpu-1", before)
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"})
    assert deployed.ok("login", "srun -N2 true && echo fine", user="root") == "fine"


def test_controller_restart_keeps_queued_jobs(deployed: Deployed) -> None:
    deployed.user("alice")
    job = deployed.ok(
        "login", "cd ~ && sbatch --parsable --hold --wrap 'echo survived > held.out'", user="alice"
    )
    deployed.container("slurmctld").restart(timeout=10)
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"})
    assert deployed.ok("slurmctld", f"squeue -h -j {job} -o %T") == "PENDING"
    deployed.ok("slurmctld", f"scontrol release {job}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        code, out = deployed.sh("login", "cat /jail/home/alice/held.out")
        if code == 0 and out == "survived":
            return
        time.sleep(1)
    pytest.fail("the held job did not run after the controller restart")


def test_a_killed_node_comes_back_into_service(deployed: Deployed) -> None:
    container = deployed.container("cpu-1")
    before = _slurmd_started(deployed, "cpu-1")
    os.kill(container.attrs["State"]["Pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        container.reload()
        if container.attrs["RestartCount"] >= 1 and container.status == "running":
            break
        time.sleep(1)
    else:
        pytest.fail(f"cpu-1 was not restarted: {container.status}")
    _registered_again(deployed, "cpu-1", before)
    deployed.wait_states({"cpu-1": "idle"})
    assert deployed.ok("login", "srun -N1 -w cpu-1 hostname", user="root") == "cpu-1"


def test_scale_up_then_down(deployed: Deployed) -> None:
    proc = deployed.invoke("scale", "cpu=3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert deployed.states() == {"cpu-0": "idle", "cpu-1": "idle", "cpu-2": "idle"}
    assert sorted(deployed.ok("login", "srun -N3 hostname", user="root").split()) == [
        "cpu-0",
        "cpu-1",
        "cpu-2",
    ]
    proc = deployed.invoke("scale", "cpu=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "removed cpu-2" in proc.stdout
    assert deployed.states() == {"cpu-0": "idle", "cpu-1": "idle"}
    gone = deployed.client.containers.list(
        all=True,
        filters={
            "label": [
                f"com.docker.compose.project={deployed.name}",
                "com.docker.compose.service=cpu-2",
            ]
        },
    )
    assert gone == []


def _deploy(deployed: Deployed, root):
    where = ["--cluster", str(root / "cluster.yaml"), "--out", str(root / "out")]
    return invoke(deployed.env, "deploy", *where)


def test_deploy_refuses_a_port_in_use(deployed: Deployed, tmp_path, client) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        write_cluster(tmp_path, "sfbusy", port)
        proc = _deploy(deployed, tmp_path)
    clean_failure(proc, f"login.port: 127.0.0.1:{port} is not free")
    assert (
        client.containers.list(all=True, filters={"label": "com.docker.compose.project=sfbusy"})
        == []
    )


def test_deploy_before_images_exist_names_the_build(deployed: Deployed, tmp_path, client) -> None:
    data = load_yaml((ROOT / "versions.yaml").read_text())
    data["sets"]["unbuilt"] = {**data["sets"]["default"], "registry": "unbuilt.invalid/sf"}
    config = tmp_path / "versions.yaml"
    config.write_text(dump_yaml(data, sort_keys=False))
    write_cluster(tmp_path, "sfnoimg", free_port(), images={"set": "unbuilt"})
    where = ["--cluster", str(tmp_path / "cluster.yaml"), "--out", str(tmp_path / "out")]
    proc = invoke(deployed.env, "deploy", "--config", str(config), *where)
    clean_failure(proc, "is not built")
    assert "invoke build --set unbuilt" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_scale_of_a_cluster_never_deployed_stores_nothing(deployed: Deployed, tmp_path) -> None:
    write_cluster(tmp_path, "sfnever", free_port())
    env = {**deployed.env, "SLURMFORGE_STATE_DIR": str(tmp_path / "state")}
    proc = invoke(env, "scale", "cpu=3", "--cluster", str(tmp_path / "cluster.yaml"))
    clean_failure(proc, "cluster sfnever is not deployed here")
    assert not (tmp_path / "state").exists()


def test_more_nodes_than_one_network_holds_are_refused_before_anything(
    deployed: Deployed, tmp_path
) -> None:
    """A local cluster is one Docker network, which Linux's bridge caps at 1,024 ports: a file of
    1,100 nodes is refused by deploy (a dry run too) and by a scale of a running cluster, in one
    line, writing and storing nothing."""
    nodesets = [{"name": "cpu", "definitions": ["cpu-small"], "replicas": 1100}]
    write_cluster(tmp_path, "sfhuge", free_port(), nodesets=nodesets)
    env = {**deployed.env, "SLURMFORGE_STATE_DIR": str(tmp_path / "state")}
    where = ["--cluster", str(tmp_path / "cluster.yaml"), "--out", str(tmp_path / "out")]
    for args in (["deploy"], ["deploy", "--dry-run"]):
        proc = invoke(env, *args, *where)
        clean_failure(proc, "nodesets: 1100 nodes and")
        assert "at most 1023 containers" in proc.stderr, proc.stderr
    proc = deployed.invoke("scale", "cpu=1100")
    clean_failure(proc, "nodesets: 1100 nodes and")
    assert not (tmp_path / "out").exists() and not (tmp_path / "state").exists()
    kept = Path(deployed.env["SLURMFORGE_STATE_DIR"]) / deployed.name / "replicas.json"
    assert not kept.exists() or "1100" not in kept.read_text()


def test_deploy_timeout_names_the_failing_node(deployed: Deployed, tmp_path, client) -> None:
    """A node whose munge key is withheld never registers: deploy gives up naming it, with logs."""
    nodesets = [
        {
            "name": "cpu",
            "definitions": ["cpu-small"],
            "replicas": 1,
            "env": {"MUNGE_KEY_FILE": "/nonexistent"},
        }
    ]
    write_cluster(tmp_path, "sftimeout", free_port(), nodesets=nodesets)
    env = {**deployed.env, "SLURMFORGE_STATE_DIR": str(tmp_path / "state")}
    where = ["--cluster", str(tmp_path / "cluster.yaml"), "--out", str(tmp_path / "out")]
    try:
        proc = invoke(env, "deploy", "--timeout", "20", *where)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
        assert errors[0].startswith("error: not ready after 20 s: cpu-0"), proc.stderr
        assert "Traceback" not in proc.stderr
        assert "sftimeout" in proc.stderr and "last 15 log lines" in proc.stderr
    finally:
        invoke(env, "down", "--volumes", *where)


def test_a_dry_run_writes_what_deploy_would_and_starts_nothing(
    deployed: Deployed, tmp_path, client
) -> None:
    write_cluster(tmp_path, "sfdry", free_port())
    env = {**deployed.env, "SLURMFORGE_STATE_DIR": str(tmp_path / "state")}
    where = ["--cluster", str(tmp_path / "cluster.yaml"), "--out", str(tmp_path / "out")]
    proc = invoke(env, "deploy", "--dry-run", *where)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = tmp_path / "out" / "local" / "sfdry"
    assert f"to {written}; nothing was started" in proc.stdout
    compose = load_yaml((written / "compose.yaml").read_text())
    assert {"slurmctld", "login", "cpu-0", "cpu-1"} <= set(compose["services"])
    assert "NodeName=cpu-[0-1]" in (written / "etc" / "slurm" / "slurm.conf").read_text()
    # the munge key is where a deploy would make it, and is not made
    assert str(tmp_path / "state" / "sfdry" / "munge.key") in (written / "compose.yaml").read_text()
    assert not (tmp_path / "state").exists()
    label = {"label": "com.docker.compose.project=sfdry"}
    assert client.containers.list(all=True, filters=label) == []
    assert client.volumes.list(filters=label) == []


def test_a_dry_run_refuses_the_directory_a_running_cluster_reads(deployed: Deployed) -> None:
    conf = deployed.root / "out" / "local" / deployed.name / "etc" / "slurm" / "slurm.conf"
    before = conf.read_bytes()
    proc = deployed.invoke("deploy", "--dry-run")
    clean_failure(proc, f"cluster {deployed.name} is running from")
    assert "hint: give --out DIR" in proc.stderr
    assert conf.read_bytes() == before
