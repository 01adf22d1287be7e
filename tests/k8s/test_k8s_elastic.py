"""Elastic node sets on the k8s target, as users and operators meet them: a node set of 0 to 3
nodes that exist only while jobs need them (one Deployment per node, scaled by node-power, a
second container of slurmctld's pod and the only holder of a service-account token).

A 3-node job on the set at zero starts three pods and runs on all three; a redeploy while Slurm
runs a node keeps that node's pod and its job; idle nodes stop (no pod left, sinfo shows them
powered down); and the token node-power holds can scale those Deployments and do nothing else
on the server, while slurmctld holds none. On the lab the pods reach the API server through
lab.ApiForPods (it has no kube-proxy)."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator

import pytest

from tests.conftest import until
from tests.k8s import lab
from tests.k8s.conftest import K8sCluster

pytestmark = pytest.mark.k8s

USER = "elena"
IDLE = 30  # elastic.idle: SuspendTime
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
         "elastic": {"max": 3, "idle": IDLE, "start_timeout": 120}},
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
