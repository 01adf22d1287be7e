"""A site's own configuration on a cluster of the local target (tests/site_settings.py): its Slurm
settings are live, its QoS limits hold, its prolog runs, its storage is mounted read-only in the
jail; a changed setting reaches a running cluster without touching its jobs; and bad settings
are refused before anything changes."""

from __future__ import annotations

import re
import time

import pytest

from tests.cluster.deployed import Clusters, Deployed
from tests.cluster.helpers import scrape
from tests.common import ROOT, dump_yaml, load_yaml
from tests.site_settings import HEALTH_INTERVAL, README, site

KEYS = ("slurm", "accounting", "mounts", "topology", "health", "nodesets", "partitions")
# within a few of the health check's intervals (tests/site_settings.py), and a reconfigure
HEALTH_WITHIN = 10 * HEALTH_INTERVAL
JOBS_TMP = "/var/lib/slurmforge/jobs"  # where a node keeps its jobs' /tmp directories


@pytest.fixture(scope="module")
def cluster(images: dict[str, str], clusters: Clusters) -> Deployed:
    root = clusters.root("site")
    shipped = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())
    changes = {k: v for k, v in site(root, shipped).items() if k in KEYS}
    deployed = clusters.deploy("sfsite", root, **changes)
    deployed.user("alice")
    return deployed


def _config(cluster: Deployed) -> dict[str, str]:
    out = cluster.ok("slurmctld", "scontrol show config")
    return dict((m[1], m[2].strip()) for m in re.finditer(r"^(\S+)\s+= (.*)$", out, re.M))


def _submit(cluster: Deployed, options: str) -> str:
    out = cluster.ok("login", f"cd ~ && sbatch {options}", user="alice")
    return re.search(r"Submitted batch job (\d+)", out)[1]


def _squeue(cluster: Deployed, job: str) -> tuple[str, str]:
    out = cluster.ok("slurmctld", f"squeue -h -j {job} -o '%T %r'")
    state, reason = out.split(None, 1)
    return state, reason


def _wait(cluster: Deployed, job: str, state: str, timeout: float = 60) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    seen = _squeue(cluster, job)
    while seen[0] != state and time.monotonic() < deadline:
        time.sleep(1)
        seen = _squeue(cluster, job)
    assert seen[0] == state, f"job {job}: {seen}"
    return seen


def test_the_site_settings_are_live(cluster: Deployed) -> None:
    config = _config(cluster)
    assert config["SchedulerParameters"] == "batch_sched_delay=0,bf_interval=5"
    assert config["MaxArraySize"] == "5001"
    assert config["TopologyPlugin"] == "topology/tree"
    assert "associations,limits,qos" in config["AccountingStorageEnforce"]
    assert "SwitchName=leaf0" in cluster.ok("slurmctld", "scontrol show topology")
    assert "Weight=10" in cluster.ok("slurmctld", "scontrol show node cpu-0")
    assert "PriorityTier=2" in cluster.ok("slurmctld", "scontrol show partition main")
    qos = cluster.ok("slurmctld", "sacctmgr -n -P show qos small format=name,priority,maxtrespu")
    assert qos == "small|10|cpu=1"
    assoc = cluster.ok("slurmctld", "sacctmgr -n -P show assoc account=default user= format=qos")
    assert set(assoc.split(",")) == {"normal", "small"}


def test_a_job_over_its_qos_limit_pends_with_the_qos_reason(cluster: Deployed) -> None:
    first = _submit(cluster, "--qos=small -n1 --wrap 'sleep 120'")
    second = _submit(cluster, "--qos=small -n1 --wrap 'sleep 120'")
    try:
        _wait(cluster, first, "RUNNING")
        deadline = time.monotonic() + 30
        while _squeue(cluster, second)[1] != "QOSMaxCpuPerUserLimit":
            assert time.monotonic() < deadline, _squeue(cluster, second)
            time.sleep(1)
        assert _squeue(cluster, second)[0] == "PENDING"
    finally:
        cluster.sh("slurmctld", f"scancel {first} {second}")


def test_the_prolog_runs_before_each_job_and_the_job_sees_its_marker(cluster: Deployed) -> None:
    out = cluster.ok(
        "login",
        "srun -N2 bash -c 'cat /scratch/prolog-$SLURM_JOB_ID-$(hostname)' 2>/dev/null",
        user="alice",
    )
    lines = sorted(out.splitlines())
    assert len(lines) == 2, out
    jobs = {line.split()[0] for line in lines}
    assert len(jobs) == 1 and sorted(line.split()[1] for line in lines) == ["cpu-0", "cpu-1"]


def test_a_failing_prolog_drains_its_node_and_holds_the_job(cluster: Deployed) -> None:
    cluster.ok("login", "touch /scratch/fail-prolog-cpu-1", user="alice")
    job = ""
    try:
        job = _submit(cluster, "-w cpu-1 --wrap true")
        deadline = time.monotonic() + 60
        while "DRAIN" not in (node := cluster.ok("slurmctld", "scontrol show node cpu-1")):
            assert time.monotonic() < deadline, node
            time.sleep(1)
        assert re.search(r"Reason=Prolog error", node), node
        _, reason = _wait(cluster, job, "PENDING")
        assert reason == "launch failed requeued held" or "Held" in reason, reason
    finally:
        cluster.ok("login", "rm -f /scratch/fail-prolog-cpu-1", user="alice")
        if job:
            cluster.sh("slurmctld", f"scancel {job}")
        cluster.sh("slurmctld", "scontrol update NodeName=cpu-1 State=RESUME")
        cluster.wait_states({"cpu-1": "idle"})


def _node(cluster: Deployed, node: str) -> tuple[str, str]:
    """A node's state flags and drain reason (without its [user@time] stamp), as sinfo has them."""
    out = cluster.ok("slurmctld", f"sinfo -h -N -n {node} -o '%T|%E'")
    state, reason = out.split("|", 1)
    return state, "" if reason == "none" else reason


def _until_node(cluster: Deployed, node: str, ok, what: str) -> tuple[str, str]:
    deadline = time.monotonic() + HEALTH_WITHIN
    while not ok(*(seen := _node(cluster, node))):
        assert time.monotonic() < deadline, f"{node}: {what}: not within {HEALTH_WITHIN} s: {seen}"
        time.sleep(1)
    return seen


def test_a_failing_site_health_check_drains_its_node_and_an_admins_drain_is_left_alone(
    cluster: Deployed,
) -> None:
    """The site's check fails on both nodes; cpu-1 was drained by an admin first. cpu-0 drains
    with the check's name and last line; cpu-1 keeps the admin's reason. Once the check passes,
    cpu-0 returns to service by itself; cpu-1 stays the admin's."""
    admin = "maintenance: new disks"
    cluster.ok("slurmctld", f"scontrol update NodeName=cpu-1 State=DRAIN Reason='{admin}'")
    flags = "/jail/scratch/fail-health-cpu-0 /jail/scratch/fail-health-cpu-1"
    try:
        cluster.ok("login", f"touch {flags}")
        reason = "health: fabric: link down (asked by a test)"
        _until_node(cluster, "cpu-0", lambda s, r: "drain" in s and r == reason, "drained")
        assert _node(cluster, "cpu-1") == ("drained", admin)
        # the exporter tells the checker's drain from the admin's (which the alerts tell apart)
        scraped = cluster.container("exporter").exec_run(["bash", "-c", scrape(9341)])
        samples = re.findall(r"^slurm_node_drain_info\{(.*)\} ", scraped.output.decode(), re.M)
        labels = [dict(re.findall(r'(\w+)="([^"]*)"', sample)) for sample in samples]
        drains = {label["node"]: label["cause"] for label in labels}
        assert drains == {"cpu-0": "health-check", "cpu-1": "admin"}, scraped.output.decode()
        # new work goes around both
        code, out = cluster.sh("login", "srun -N1 -t1 --immediate=5 true", user="alice")
        assert code != 0, out
        cluster.ok("login", f"rm -f {flags}")
        _until_node(cluster, "cpu-0", lambda s, r: s == "idle" and not r, "back in service")
        time.sleep(2 * HEALTH_INTERVAL)  # cpu-1 ran its checks, passing, since
        assert _node(cluster, "cpu-1") == ("drained", admin)
    finally:
        cluster.ok("login", f"rm -f {flags}")
        cluster.ok("slurmctld", "scontrol update NodeName=cpu-1 State=RESUME")
        cluster.wait_states({"cpu-0": "idle", "cpu-1": "idle"})


def test_a_node_whose_tmp_fills_up_drains_and_returns_once_the_job_that_filled_it_ends(
    cluster: Deployed,
) -> None:
    """cpu-0 gets a small disk for its jobs' /tmp (16 MiB, mounted by the admin); a user's job
    fills its /tmp there. The node drains (the job runs on), the next job goes to cpu-1, and
    when the first job ends (its /tmp goes with it) cpu-0 is back in service."""
    node = cluster.container("cpu-0")
    assert node.exec_run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs",
                          JOBS_TMP]).exit_code == 0  # fmt: skip
    job = ""
    try:
        job = _submit(cluster, "-w cpu-0 -o /dev/null --wrap "
                      "'dd if=/dev/zero of=/tmp/fill bs=1M count=64; sleep 600'")  # fmt: skip
        state, reason = _until_node(
            cluster, "cpu-0", lambda s, r: "drain" in s and r.startswith("health: /tmp"), "drained"
        )
        assert state == "draining" and reason == "health: /tmp 100% full", (state, reason)
        other = _submit(cluster, "-o /dev/null --wrap 'sleep 60'")
        _wait(cluster, other, "RUNNING")
        assert cluster.ok("slurmctld", f"squeue -h -j {other} -o %N") == "cpu-1"
        cluster.ok("slurmctld", f"scancel {job} {other}")
        _until_node(cluster, "cpu-0", lambda s, r: s == "idle" and not r, "back in service")
    finally:
        if job:
            cluster.sh("slurmctld", f"scancel {job}")
        deadline = time.monotonic() + 60
        while node.exec_run(["umount", JOBS_TMP]).exit_code != 0:
            assert time.monotonic() < deadline, "the jobs' /tmp stays busy"
            time.sleep(1)
        cluster.wait_states({"cpu-0": "idle"})


def test_the_mount_is_readable_and_not_writable_from_a_job_in_the_jail(cluster: Deployed) -> None:
    assert cluster.ok("login", "srun cat /datasets/README", user="alice") == README.strip()
    code, out = cluster.sh("login", "srun touch /datasets/mine", user="alice")
    assert code != 0 and "Read-only file system" in out, out
    # and from a login session
    code, out = cluster.sh("login", "touch /datasets/mine", user="alice")
    assert code != 0 and "Read-only file system" in out, out


def test_a_changed_setting_is_live_on_the_running_cluster_and_no_job_is_killed(
    cluster: Deployed,
) -> None:
    job = _submit(cluster, "-n1 --wrap 'sleep 300'")
    try:
        _wait(cluster, job, "RUNNING")
        data = load_yaml(cluster.cluster_file.read_text())
        data["slurm"]["conf"]["SchedulerParameters"] = "batch_sched_delay=0,bf_interval=7"
        data["slurm"]["cgroup_conf"] = {"ConstrainSwapSpace": False}
        data["slurm"]["slurmdbd_conf"] = {"PurgeStepAfter": "6month"}
        cluster.cluster_file.write_text(dump_yaml(data, sort_keys=False))
        proc = cluster.invoke("deploy")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _config(cluster)["SchedulerParameters"] == "batch_sched_delay=0,bf_interval=7"
        assert _config(cluster)["ConstrainSwapSpace"] == "no"  # cgroup.conf, re-read too
        # slurmdbd.conf: slurmdbd restarted with it (it holds no job)
        dbd = cluster.ok("slurmctld", "sacctmgr show configuration")
        assert re.search(r"^PurgeStepAfter\s+= 6 months", dbd, re.M), dbd
        assert _squeue(cluster, job)[0] == "RUNNING"
    finally:
        cluster.sh("slurmctld", f"scancel {job}")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            lambda d: d["slurm"]["conf"].update(SchedulerParamters="bf_interval=9"),
            "slurm.conf.SchedulerParamters: Slurm {slurm} takes no slurm.conf parameter "
            "'SchedulerParamters'; did you mean SchedulerParameters?",
        ),
        (
            lambda d: d["slurm"]["conf"].update(AuthType="auth/none"),
            "slurm.conf.AuthType: slurmforge manages AuthType",
        ),
        (
            lambda d: d["mounts"].append({"path": "/usr/share/data", "host_path": "/srv"}),
            "mounts[1].path: expected a directory outside / and the jail's system directories",
        ),
        (
            lambda d: d["accounting"]["qos"].append(
                {"name": "broken", "MaxTRESPerUser": "cpu=1,gres/tpu=4"}
            ),
            "accounting.qos[1].MaxTRESPerUser: unknown TRES 'gres/tpu'",
        ),
    ],
    ids=["typo", "managed", "mount-on-usr", "unknown-tres"],
)
def test_bad_settings_exit_2_with_one_line_and_change_nothing(
    cluster: Deployed, change, said: str
) -> None:
    text = cluster.cluster_file.read_text()
    conf = cluster.root / "out" / "local" / cluster.name / "etc" / "slurm" / "slurm.conf"
    before = (conf.read_text(), _config(cluster), _qos(cluster))
    data = load_yaml(text)
    change(data)
    cluster.cluster_file.write_text(dump_yaml(data, sort_keys=False))
    try:
        proc = cluster.invoke("deploy")
    finally:
        cluster.cluster_file.write_text(text)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("hint:")]
    said = said.format(slurm=cluster.ok("slurmctld", "scontrol version").split()[-1])
    assert len(errors) == 1 and errors[0].startswith("error: ") and said in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert (conf.read_text(), _config(cluster), _qos(cluster)) == before


def _qos(cluster: Deployed) -> str:
    return cluster.ok("slurmctld", "sacctmgr -n -P show qos format=name,priority,maxtrespu,preempt")


def test_a_qos_slurmdbd_refuses_at_deploy_is_not_left_half_made(cluster: Deployed) -> None:
    """What the file cannot show: an admin made `normal` preempt `small` by hand, and the file
    now has `small` preempt `normal` too, beside a new QoS. slurmdbd refuses the loop; the new
    QoS, which this deploy had added, is deleted again, and nothing else changes."""
    text = cluster.cluster_file.read_text()
    cluster.ok("slurmctld", "sacctmgr -i modify qos normal set Preempt=small")
    before = _qos(cluster)
    data = load_yaml(text)
    data["accounting"]["qos"][0]["Preempt"] = ["normal"]
    data["accounting"]["qos"].append({"name": "urgent", "Priority": 50, "MaxTRESPerUser": "cpu=2"})
    cluster.cluster_file.write_text(dump_yaml(data, sort_keys=False))
    try:
        proc = cluster.invoke("deploy")
    finally:
        cluster.cluster_file.write_text(text)
        after = _qos(cluster)
        cluster.ok("slurmctld", "sacctmgr -i modify qos normal set Preempt=''")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    # one line says what failed and what was undone (compose's own trace comes before it)
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(error) == 1, proc.stderr
    assert "sacctmgr could not set QoS small" in error[0], proc.stderr
    assert "removed again what this deploy had added: QoS urgent" in error[0], proc.stderr
    assert after == before
