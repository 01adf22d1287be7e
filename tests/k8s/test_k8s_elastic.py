"""Elastic node sets on the k8s target, as users and operators meet them: a node set of 0 to 3
nodes that exist only while jobs need them (one Deployment per node, scaled by node-power, a
second container of slurmctld's pod and the only holder of a service-account token).

A 3-node job on the set at zero starts three pods and runs on all three; a redeploy while Slurm
runs a node keeps that node's pod and its job; idle nodes stop (no pod left, sinfo shows them
powered down); a node whose pod finds no room is down after start_timeout, its job requeued
and its start withdrawn; the token node-power holds can scale those Deployments and
do nothing else on the server, while slurmctld holds none; and a cluster restored into another
namespace runs the node that ran at the backup and starts the others for a job. On the lab the
pods reach the API server through lab.ApiForPods (it has no kube-proxy)."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.common import until
from tests.k8s import lab
from tests.k8s.kube import K8sCluster

pytestmark = pytest.mark.k8s

USER = "elena"
IDLE = 30  # elastic.idle: SuspendTime
START_TIMEOUT = 120  # elastic.start_timeout: ResumeTimeout
NO_ROOM = "slurmforge.test/room"  # a node label no node has
NODES = ["cpu-0", "cpu-1", "cpu-2"]
# stopped after IDLE, powered down once SuspendTimeout (30 s) has passed, checked every 10 s
STOPPED_WITHIN = IDLE + 30 + 60
# what node-power runs to ask the API something with its own token (method, path) → HTTP status
ASK = """
import http.client, json, os, ssl, sys
d = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(d + "/token").read().strip()
api = http.client.HTTPSConnection(os.environ["KUBERNETES_SERVICE_HOST"], 443,
    context=ssl.create_default_context(cafile=d + "/ca.crt"), timeout=20)
method, path = sys.argv[1], sys.argv[2]
body = json.dumps({"spec": {"replicas": 0}}) if method == "PATCH" else None
api.request(method, path, body=body, headers={"Authorization": "Bearer " + token,
    "Content-Type": "application/merge-patch+json"})
print(api.getresponse().status)
"""


@pytest.fixture(scope="module")
def elastic(k8s_cluster: K8sCluster) -> Iterator[K8sCluster]:
    data = k8s_cluster.data()
    data["nodesets"] = [
        {"name": "cpu", "definitions": ["cpu-small"],
         "elastic": {"max": 3, "idle": IDLE, "start_timeout": START_TIMEOUT}},
    ]  # fmt: skip
    k8s_cluster.write(data)
    with lab.ApiForPods() if k8s_cluster.kube.lab else contextlib.nullcontext():
        proc = k8s_cluster.deploy()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        kube = k8s_cluster.kube
        kube.sh("login-0", "login", f"chroot /jail createuser --non-interactive {USER}")
        yield k8s_cluster


def _node_pods(kube) -> dict[str, str]:
    """Running node pods: Slurm node (the pod's host name) → pod name."""
    out = kube.run("get", "pods", "-l", "app.kubernetes.io/component=node", "-o", "json")
    return {
        p["spec"].get("hostname") or p["metadata"]["name"]: p["metadata"]["name"]
        for p in json.loads(out)["items"]
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def _scale(kube, node: str) -> int:
    return int(kube.run("get", "deployment", node, "-o", "jsonpath={.spec.replicas}"))


def _job_state(kube, job: str) -> str:
    out = kube.sh("slurmctld-0", "slurmctld", f"scontrol show job {job} -o")
    return re.search(r"JobState=(\S+)", out).group(1)


def _submit(kube, options: str) -> str:
    out = kube.sh("login-0", "login", f"cd && sbatch --parsable {options}", user=USER)
    return out.split(";")[0]


def test_nothing_runs_until_a_job_needs_it(elastic: K8sCluster) -> None:
    kube = elastic.kube
    assert _node_pods(kube) == {}
    assert kube.states() == {n: "idle~" for n in NODES}
    assert [_scale(kube, n) for n in NODES] == [0, 0, 0]


def test_a_3_node_job_on_a_set_at_zero_starts_three_pods_and_runs_on_all(
    elastic: K8sCluster,
) -> None:
    kube = elastic.kube
    start = time.monotonic()
    job = _submit(kube, "-N3 -o elastic-%j.out --wrap 'srun hostname | sort'")
    until(f"job {job} completed", lambda: _job_state(kube, job) == "COMPLETED", 300)
    took = time.monotonic() - start
    out = kube.sh("login-0", "login", f"cat ~/elastic-{job}.out", user=USER)
    assert out.split() == NODES
    assert [_scale(kube, n) for n in NODES] == [1, 1, 1]
    print(f"sbatch -N3 on a set at zero to COMPLETED: {took:.0f} s")


def test_a_redeploy_keeps_the_pod_and_the_job_of_a_node_slurm_runs(elastic: K8sCluster) -> None:
    kube = elastic.kube
    job = _submit(kube, "-N1 -w cpu-1 -o /dev/null --wrap 'sleep 600'")
    until(f"job {job} running", lambda: _job_state(kube, job) == "RUNNING", 300)
    before = _node_pods(kube)["cpu-1"]
    proc = elastic.deploy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _node_pods(kube)["cpu-1"] == before
    assert _scale(kube, "cpu-1") == 1
    assert _job_state(kube, job) == "RUNNING"
    kube.sh("slurmctld-0", "slurmctld", f"scancel {job}")


def test_idle_nodes_stop_and_show_powered_down(elastic: K8sCluster) -> None:
    kube = elastic.kube
    kube.wait_states({n: "idle~" for n in NODES}, STOPPED_WITHIN + 60)
    until("node pods gone", lambda: _node_pods(kube) == {}, 120)
    assert [_scale(kube, n) for n in NODES] == [0, 0, 0]


def test_a_node_that_cannot_start_is_down_its_pod_withdrawn_and_its_job_requeued(
    elastic: K8sCluster,
) -> None:
    """A node whose pod finds no room (a node selector no node matches: Pending, as in a full
    pool) is down after start_timeout with Slurm's reason, in the metrics too; its job is
    requeued; and its start is withdrawn (ResumeFailProgram), so no pod waits to come up later
    behind Slurm's back. The operator's fix, as the how-to says, returns it to service (the restore
    test below starts it for a job). That the requeued job then runs on another node is Slurm's
    own, once its launch credential has expired (2 minutes): the local test waits for it."""
    kube = elastic.kube
    kube.wait_states({n: "idle~" for n in NODES}, STOPPED_WITHIN + 60)
    room = lambda value: kube.run(  # noqa: E731
        "patch", "deployment", "cpu-0", "--type=merge", "-p",
        json.dumps({"spec": {"template": {"spec": {"nodeSelector": {NO_ROOM: value}}}}}),
    )  # fmt: skip
    room("none")
    job = _submit(kube, "-N1 -o /dev/null --wrap hostname")

    def attempts() -> list[str]:
        """Each run of the job: State|NodeList (sacct -D keeps the requeued one's record)."""
        out = kube.sh("login-0", "login", f"sacct -D -X -n -P -j {job} -o State,NodeList",
                      user=USER)  # fmt: skip
        return out.splitlines()

    until("the job requeued", lambda: attempts()[:1] in (
        ["NODE_FAIL|cpu-0"], ["REQUEUED|cpu-0"]), START_TIMEOUT + 120)  # fmt: skip
    assert _job_state(kube, job) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETED"), attempts()
    kube.sh("login-0", "login", f"scancel {job}", user=USER)
    reasons = kube.sh("slurmctld-0", "slurmctld", "sinfo -R -h -o '%N|%E'")
    assert "cpu-0|ResumeTimeout reached" in reasons.splitlines(), reasons
    assert re.search(r'slurm_node_state\{node="cpu-0",state="(down|not_responding)"\} 1.0',
                     kube.metrics())  # fmt: skip
    # withdrawn: its Deployment, scaled to one for the job, back at zero (only a stop does
    # that), and no pod of it left Pending
    until("cpu-0's start withdrawn", lambda: _scale(kube, "cpu-0") == 0 and not kube.run(
        "get", "pods", "-l", "app.kubernetes.io/component=node", "-o", "name").count("cpu-0"),
        60)  # fmt: skip
    # fixed (room again) and returned to service: powered down and idle
    room(None)
    kube.sh("slurmctld-0", "slurmctld", "scontrol update nodename=cpu-0 state=resume")
    kube.sh("slurmctld-0", "slurmctld", "scontrol update nodename=cpu-0 state=power_down")
    kube.wait_states({"cpu-0": "idle~"}, 120)


def test_only_node_power_holds_a_token_and_it_scales_those_deployments_alone(
    elastic: K8sCluster,
) -> None:
    kube = elastic.kube
    ns = kube.namespace
    ask = lambda method, path: kube.run(  # noqa: E731
        "exec", "slurmctld-0", "-c", "node-power", "--", "python3", "-c", ASK, method, path
    )
    scale = f"/apis/apps/v1/namespaces/{ns}/deployments/cpu-2/scale"
    assert ask("GET", scale) == "200"
    assert ask("PATCH", scale) == "200"  # (it was at 0 already)
    for method, path in (
        ("GET", f"/api/v1/namespaces/{ns}/pods"),
        ("GET", f"/api/v1/namespaces/{ns}/secrets"),
        ("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/cpu-2"),
        ("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/slurmrestd/scale"),
        ("GET", "/api/v1/namespaces/default/pods"),
    ):
        assert ask(method, path) == "403", (method, path)
    mounted = kube.sh("slurmctld-0", "slurmctld", "ls /var/run/secrets/kubernetes.io 2>&1 || true")
    assert "No such file" in mounted


def test_a_restored_cluster_runs_the_node_that_ran_and_starts_the_others_for_jobs(
    elastic: K8sCluster, tmp_path: Path
) -> None:
    """The namespace lost and the cluster restored into another from a backup taken while one
    elastic node ran a job and the others were stopped: that node's Deployment is scaled to one
    and the node is in service, the stopped ones come back powered down with their Deployments
    at zero, and a job starts them (cpu-0 among them, returned to service by the test above).
    Last: it deletes the module's namespace."""
    kube = elastic.kube
    source = kube.namespace
    held = _submit(kube, "-w cpu-1 --no-requeue -o /dev/null --wrap 'sleep 600'")
    kube.wait_states({"cpu-0": "idle~", "cpu-2": "idle~"}, STOPPED_WITHIN + 60)
    until(f"job {held} running", lambda: _job_state(kube, held) == "RUNNING", START_TIMEOUT)
    proc = elastic.task("backup", "--namespace", source, "--out", str(tmp_path / "backups"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (archive,) = (tmp_path / "backups").glob("*.tar")
    kube.run("delete", "namespace", source, "--wait=true", "--timeout=300s", namespaced=False)
    target = f"{source}-r"
    if kube.lab:
        manifest, names = lab.volumes(tmp_path / "pv", target, elastic.data()["kubernetes"])
        kube.run("apply", "-f", str(manifest), namespaced=False)
        kube.made += [f"persistentvolume/{n}" for n in names]
    try:
        proc = elastic.task("restore", str(archive), "--namespace", target,
                            "--out", str(tmp_path / "out"), "--timeout", "300")  # fmt: skip
        said = proc.stdout + proc.stderr
        assert proc.returncode == 0, said
        assert "note: starting cpu-1: Slurm has them powered up" in said, said
        with kube.in_namespace(target):
            states = kube.states()
            assert {n: states[n] for n in ("cpu-0", "cpu-2")} == dict.fromkeys(
                ("cpu-0", "cpu-2"), "idle~"
            ), states
            assert states["cpu-1"] in ("idle", "alloc", "mix", "comp"), states
            assert [_scale(kube, n) for n in NODES] == [0, 1, 0]
            assert sorted(_node_pods(kube)) == ["cpu-1"]
            # the job that ran at the backup has no process left (how-to); its user cancels it
            kube.sh("login-0", "login", f"scancel {held}", user=USER)
            job = _submit(kube, "-N3 -o /dev/null --wrap 'srun true'")
            until(f"job {job} completed", lambda: _job_state(kube, job) == "COMPLETED",
                  START_TIMEOUT + 120)  # fmt: skip
            assert [_scale(kube, n) for n in NODES] == [1, 1, 1]
    finally:
        kube.run("delete", "namespace", target, "--wait=false", check=False, namespaced=False)
