"""The default cluster on a real Kubernetes API server and kubelet (tests/k8s/conftest.py says
which): deployed with `invoke deploy --target k8s`, every node idle, jobs from the login pod in
the jail; accounting (sacct, sacctmgr) on the cluster's MariaDB and the REST API with a token;
the database and slurmdbd deleted, or their password Secret lost; a node pod that comes back
under a new IP, slurmctld deleted with a held job, a redeploy with a changed cluster file, and
`invoke scale` up and down under running jobs; a node pod deleted under a job (no grace: the
job ends NODE_FAIL; with its grace: the node drains and the job finishes), a job's memory held
in a cgroup of its own; and, last, the site's own configuration (tests/site_settings.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
import urllib.error
from collections.abc import Iterator

import pytest

from tests import rest_client
from tests.common import ROOT, until
from tests.k8s import lab
from tests.k8s.kube import INVOKE, LIVE, K8sCluster, sacct, submit
from tests.k8s.lab import LAB
from tests.site_settings import README, site

pytestmark = pytest.mark.k8s
# how long a re-addressed node is watched: past slurmctld's pings of it (SlurmdTimeout=60: every
# 20 s a node not heard from is pinged, and marked not responding after 60 s)
PING_WATCH_S = 100
LEVELS = ("topology.kubernetes.io/zone", "slurmforge.test/rack")  # topology.labels.tree


@pytest.fixture(scope="module")
def deployed(k8s_cluster: K8sCluster) -> Iterator[K8sCluster]:
    """Deployed, with a jail user alice (made as a user would, with createuser), and node-watch
    looking at the Kubernetes nodes every 2 s (on the lab, through the relay that stands in for
    kube-proxy), for their notices and for a topology from their zone and rack labels."""
    data = k8s_cluster.data()
    data["kubernetes"]["node_watch"] = {"enabled": True, "interval": "2s"}
    data["topology"] = {"labels": {"tree": list(LEVELS)}}
    k8s_cluster.write(data)
    with lab.ApiForPods() if k8s_cluster.kube.lab else contextlib.nullcontext():
        proc = k8s_cluster.deploy()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        k8s_cluster.kube.sh("login-0", "login", "chroot /jail createuser --non-interactive alice")
        yield k8s_cluster


def test_every_pod_starts_every_node_is_idle_and_a_user_runs_jobs(deployed: K8sCluster) -> None:
    kube = deployed.kube
    pods = kube.run(
        "get",
        "pods",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{'\\n'}{end}",
    )
    phases = dict(line.split() for line in pods.splitlines())
    # a Deployment's pod is <name>-<template hash>-<suffix>
    running = {
        re.sub(r"-[a-z0-9]{6,10}-[a-z0-9]{5}$", "", p) for p, s in phases.items() if s == "Running"
    }
    assert running == {
        *("slurmctld-0", "login-0", "cpu-0", "cpu-1"),
        *("mariadb-0", "slurmdbd", "slurmrestd"),  # accounting and the REST API, as shipped
        "exporter",  # metrics
        "node-watch",  # kubernetes.node_watch
    }, phases
    # the database made itself on its first start without restarting (its bootstrap server
    # once outlived the bootstrap, holding its locks, in a pod without CAP_KILL)
    restarts = kube.run("get", "pod", "mariadb-0", "-o", "jsonpath={..restartCount}")
    assert restarts == "0", kube.run("logs", "mariadb-0", "--previous", check=False)[-2000:]
    assert kube.states() == {"cpu-0": "idle", "cpu-1": "idle"}
    out = kube.sh("login-0", "login", "srun -N2 hostname", user="alice")
    assert sorted(out.split()) == ["cpu-0", "cpu-1"]
    out = kube.sh("login-0", "login", "cd ~ && sbatch --wait --wrap 'id -un'", user="alice")
    job = re.search(r"Submitted batch job (\d+)", out).group(1)
    assert kube.sh("login-0", "login", f"cat ~/slurm-{job}.out", user="alice") == "alice"


def test_status_and_login_as_a_user_runs_them_on_the_k8s_target(deployed: K8sCluster) -> None:
    where = ["--target", "k8s", "--cluster", str(deployed.cluster_file)]
    where += ["--out", str(deployed.root / "out")]
    where += ["--context", deployed.kube.context] if deployed.kube.context else []

    def invoke(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        argv = [*INVOKE, *args, *where]
        return subprocess.run(
            argv, cwd=ROOT, env=deployed.env, input=stdin, capture_output=True, text=True
        )

    status = invoke("status")
    assert status.returncode == 0, status.stderr
    assert re.search(r"^slurmctld-0 +1/1 +Running", status.stdout, re.M), status.stdout
    assert re.search(r"^cpu-1 +1 +main\* +idle", status.stdout, re.M), status.stdout
    # a shell in the jail on the login pod, as alice: her home, and Slurm as from ssh
    login = invoke("login", "--user", "alice", stdin="id -un; pwd; srun -N2 hostname | sort\n")
    assert login.returncode == 0, login.stderr
    assert login.stdout.split() == ["alice", "/home/alice", "cpu-0", "cpu-1"], login.stdout
    uids = "jsonpath={range .items[*]}{.metadata.uid} {end}"
    before = deployed.kube.run("get", "pods", "-o", uids)
    down = invoke("down")
    assert down.returncode == 2 and "not supported by --target k8s" in down.stderr
    assert deployed.kube.run("get", "pods", "-o", uids) == before
    # nothing was touched: both nodes back to idle once the srun's job has completed (under
    # load its epilogs can keep them `comp` a few seconds past the login's exit)
    deployed.kube.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, 60)


def test_no_token_no_probe_noise_and_the_secret_exists_before_its_mounts(
    deployed: K8sCluster,
) -> None:
    kube = deployed.kube
    pods = [("slurmctld-0", "slurmctld"), ("cpu-0", "slurmd"), ("login-0", "login")]
    pods += [(_pod_of(kube, c), c) for c in ("mariadb", "slurmdbd", "slurmrestd")]
    for pod, container in pods:
        found = kube.sh(pod, container, "ls /var/run/secrets/kubernetes.io 2>&1 || true")
        assert "No such file" in found, (pod, found)
    # a TCP readiness probe made slurmd log an error every 10 s
    log = kube.run("logs", "cpu-0", "-c", "slurmd")
    assert "Zero Bytes were transmitted" not in log
    # the daemons the kubelet probes with a connection of its own take it silently: over four
    # of its probes each, their logs gain no error
    probed: dict[tuple[str, str], int] = {}
    for item in json.loads(kube.run("get", "pods", "-o", "json"))["items"]:
        for c in item["spec"]["containers"]:
            if "tcpSocket" in c.get("readinessProbe", {}):
                probed[item["metadata"]["name"], c["name"]] = c["readinessProbe"]["periodSeconds"]
    assert {"slurmdbd", "slurmrestd", "exporter"} <= {c for _, c in probed}, probed
    logs = {k: kube.run("logs", k[0], "-c", k[1]) for k in probed}
    time.sleep(4 * max(probed.values()) + 1)
    for (pod, container), before in logs.items():
        after = kube.run("logs", pod, "-c", container)
        new = after[len(before) :] if after.startswith(before) else after
        noise = [ln for ln in new.splitlines() if re.search(r"error|exception", ln, re.I)]
        assert not noise, (pod, container, noise)
    # the munge Secret exists before anything mounts it (it used to come after the pods, and
    # their mounts failed with `secret "munge-key" not found`; a kubelet whose cache is slow
    # to sync under load reports other FailedMount events, which say nothing of this)
    events = kube.run("get", "events", "--field-selector", "reason=FailedMount", "-o", "json")
    messages = [e["message"] for e in json.loads(events)["items"]]
    assert not [m for m in messages if re.search(r'secret ".*" not found', m)], messages


def test_jobs_are_accounted_and_the_rest_api_answers_a_token(deployed: K8sCluster) -> None:
    """slurmdbd on the cluster's MariaDB: createuser's association, sacct after alice's jobs;
    slurmrestd reached at its pod's address, as a client outside the Slurm pods: nodes,
    partitions, a job submitted through it that completes; no token, 401."""
    kube = deployed.kube
    assoc = kube.sh(
        "slurmctld-0", "slurmctld", "sacctmgr -n -P show assoc user=alice format=account,user"
    )
    assert assoc.splitlines() == ["default|alice"]
    ok = submit(kube, "--wait --wrap true")
    failed = submit(kube, "--wait --wrap 'exit 3' || true")
    want = {ok: ("COMPLETED", "0:0"), failed: ("FAILED", "3:0")}
    assert sacct(kube, [ok, failed]) == want

    out = kube.sh("login-0", "login", "scontrol token lifespan=600", user="alice")
    jwt = re.search(r"^SLURM_JWT=(\S+)$", out, re.M).group(1)
    base = f"http://{kube.pod_ip(_pod_of(kube, 'slurmrestd'))}:6820"
    code, spec = rest_client.call(f"{base}/openapi/v3", user="alice", jwt=jwt)
    assert code == 200, spec
    slurm = next(p for p in spec["paths"] if re.fullmatch(r"/slurm/v[0-9.]+/nodes/?", p))
    code, nodes = rest_client.call(base + slurm, user="alice", jwt=jwt)
    assert code == 200, nodes
    assert sorted(n["name"] for n in nodes["nodes"]) == ["cpu-0", "cpu-1"]
    slurm = slurm.rsplit("/nodes", 1)[0]
    code, parts = rest_client.call(f"{base}{slurm}/partitions", user="alice", jwt=jwt)
    assert code == 200 and [p["name"] for p in parts["partitions"]] == ["main"], parts
    job = {
        "name": "from-rest",
        "current_working_directory": "/home/alice",
        "environment": ["PATH=/usr/bin:/bin"],
        "script": "#!/bin/bash\nhostname\n",
    }
    url = f"{base}{slurm}/job/submit"
    code, sub = rest_client.call(url, user="alice", jwt=jwt, body={"job": job})
    assert code == 200 and not sub.get("errors"), sub
    submitted = str(sub["job_id"])
    assert sacct(kube, [submitted]) == {submitted: ("COMPLETED", "0:0")}
    assert _output(kube, f"slurm-{submitted}.out", 30) in ("cpu-0", "cpu-1")
    code, answer = rest_client.call(f"{base}{slurm}/nodes")  # no token
    assert code == 401, answer

    # no secret in any pod's definition or any process's command line; slurmdbd.conf is
    # SlurmUser's alone
    password = base64.b64decode(
        kube.run("get", "secret", "db-password", "-o", "jsonpath={.data.db-password}")
    ).decode()
    assert len(password) >= 16
    assert password not in kube.run("get", "pods", "-o", "json")
    dbd = _pod_of(kube, "slurmdbd")
    assert password not in kube.sh(dbd, "slurmdbd", "cat /proc/[0-9]*/cmdline")
    conf = kube.sh(dbd, "slurmdbd", "stat -c '%a %U' /etc/slurm/slurmdbd.conf")
    assert conf == "600 slurm"


def test_the_exporters_service_is_scraped_as_prometheus_finds_it(deployed: K8sCluster) -> None:
    """As a plain Prometheus' kubernetes_sd (role: endpoints) would: the Service's annotations
    name the port and path; its endpoints are scraped from outside the pods, with the metrics
    token from its Secret. Without it the exporter refuses the scrape."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        deployed.kube.metrics(token=False)
    assert refused.value.code == 401
    text = deployed.kube.metrics()
    assert "slurm_up 1.0" in text.splitlines()
    for node in ("cpu-0", "cpu-1"):
        assert f'slurm_node_state{{node="{node}",state="idle"}} 1.0' in text
    assert "slurm_dbd_up 1.0" in text.splitlines()


def test_two_users_on_kubernetes_keep_to_their_own(deployed: K8sCluster) -> None:
    """The isolation vectors that exist on Kubernetes, as two ordinary users on the login pod
    (tests/cluster/test_isolation.py tries them all on Compose): her home and job output, her
    running job in squeue, a job under an account she has none in, a step's view of the node's
    processes, a batch job's input named by a node path. The NetworkPolicies the zones are made
    of are taken by the API server; the lab's network does not enforce them, so whether mariadb
    answers the login pod is not a thing this lab can tell."""
    kube = deployed.kube

    def as_user(user: str, command: str) -> str:
        return kube.sh("login-0", "login", f"{command} 2>&1; true", user=user)

    kube.sh("login-0", "login", "chroot /jail createuser --non-interactive bob")
    job = as_user("alice", "cd && sbatch --parsable -N1 -t 5 --wrap 'echo mine; sleep 120'")
    try:
        until(
            f"job {job} running",
            lambda: as_user("alice", f"squeue -h -j {job} -o %T") == "RUNNING",
            60,
        )
        assert "Permission denied" in as_user("bob", f"cat /home/alice/slurm-{job}.out")
        assert as_user("bob", "squeue -h -a -o %i") == ""  # PrivateData: not hers to see
        assert job in as_user("alice", "squeue -h -o %i")
        refused = as_user("bob", "sbatch -A no_such_account --wrap true")
        assert "Invalid account" in refused, refused
        # a step sees its own processes alone: not slurmd, not alice's job on that node
        seen = as_user("bob", "srun -N1 ps -e -o comm=")
        assert seen.split() and not {"slurmd", "slurmstepd", "sleep"} & set(seen.split()), seen
        out = as_user(
            "bob",
            "cd && sbatch --parsable --wait -i /proc/1/cmdline -o node.out --wrap cat;"
            ' echo "sbatch exited $?"; cat node.out',
        )
        assert "sbatch exited 0" not in out and "slurmd" not in out, out
    finally:
        kube.sh("login-0", "login", f"scancel {job}")
    policies = kube.run("get", "networkpolicies", "-o", "name").split()
    assert {
        "networkpolicy.networking.k8s.io/cluster",
        "networkpolicy.networking.k8s.io/mariadb",
    } <= set(policies), policies
    kube.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, 60)


def test_mariadb_and_slurmdbd_deleted_lose_no_record(deployed: K8sCluster) -> None:
    kube = deployed.kube
    before = submit(kube, "--wait --wrap true")
    assert sacct(kube, [before]) == {before: ("COMPLETED", "0:0")}
    kube.run("delete", "pod", "mariadb-0", _pod_of(kube, "slurmdbd"), "--wait=true")
    kube.run("rollout", "status", "statefulset/mariadb", "--timeout=300s")
    kube.run("rollout", "status", "deployment/slurmdbd", "--timeout=300s")
    after = submit(kube, "--wait --wrap true")
    assert sacct(kube, [before, after]) == {
        before: ("COMPLETED", "0:0"),
        after: ("COMPLETED", "0:0"),
    }


def test_a_database_without_its_password_secret_or_with_another_is_refused(
    deployed: K8sCluster, tmp_path
) -> None:
    """The Secret deleted, then replaced by another password (by hand: deploy never rotates
    it): a redeploy of a changed cluster file is refused before anything is applied, with the
    way back."""
    kube = deployed.kube
    secret = json.loads(kube.run("get", "secret", "db-password", "-o", "json"))
    kept = tmp_path / "secret.json"
    fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        keep = ("apiVersion", "kind", "type", "data")
        json.dump({**{k: secret[k] for k in keep}, "metadata": {"name": "db-password"}}, fh)
    original = deployed.data()
    changed = json.loads(json.dumps(original))
    changed["partitions"][0]["max_time"] = "1:00:00"  # an apply would change slurm.conf
    config = kube.run("get", "configmap", "slurm-config", "-o", "jsonpath={.data}")
    deployed.write(changed)
    try:
        kube.run("delete", "secret", "db-password")
        gone = deployed.deploy()
        other = tmp_path / "db-password"
        other.write_text("another-password-0123456789")
        other.chmod(0o600)
        kube.run("create", "secret", "generic", "db-password", f"--from-file=db-password={other}")
        other_password = deployed.deploy()
    finally:
        deployed.write(original)
        kube.run("delete", "secret", "db-password", "--ignore-not-found")
        kube.run("create", "-f", str(kept))
    refusals = {
        "exists but its password Secret is gone": gone,
        "was created with another password than Secret db-password holds": other_password,
    }
    for says, proc in refusals.items():
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert says in proc.stderr.splitlines()[0] and "Traceback" not in proc.stderr
        assert "data-mariadb-0" in proc.stderr  # the hint: what keeps the data
    assert kube.run("get", "configmap", "slurm-config", "-o", "jsonpath={.data}") == config


def _pod_of(kube, component: str) -> str:
    """The running pod of a component (a Deployment's has a generated name)."""
    return kube.run(
        "get",
        "pods",
        "-l",
        f"app.kubernetes.io/component={component}",
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    )


def test_a_node_pod_back_under_a_new_address_is_idle_again(deployed: K8sCluster) -> None:
    kube = deployed.kube
    old = kube.pod_ip("cpu-1")
    holders = _delete_holding_its_address(kube, "cpu-1") if kube.lab else []
    try:
        if not kube.lab:
            kube.run("delete", "pod", "cpu-1")  # most CNIs give the new pod a new address
        deadline = time.monotonic() + 120
        while not (new := kube.pod_ip("cpu-1")) and time.monotonic() < deadline:
            time.sleep(1)
        assert new and (new != old or not kube.lab), (old, new)
        start = time.monotonic()
        kube.wait_states({"cpu-1": "idle"}, timeout=60)
        # srun resolves the node's name itself (slurmctld does not hand out static nodes'
        # addresses), and the cluster DNS learns the new pod's address a few seconds after
        # slurmctld does: within the same 60 s, a job runs on it
        while True:
            try:
                out = kube.sh("login-0", "login", "srun -w cpu-1 hostname", user="alice")
                break
            except AssertionError:
                if time.monotonic() - start > 60:
                    raise
                time.sleep(2)
        assert out == "cpu-1"
        # and slurmctld reaches it at its new address: a batch job (which slurmctld itself
        # launches on the node) runs there, the job's end completes, and the node is idle again
        # instead of stuck completing, with no job left behind
        out = kube.sh(
            "login-0",
            "login",
            "cd ~ && timeout 60 sbatch --wait -w cpu-1 -o readdressed.out --wrap hostname"
            " >/dev/null && cat readdressed.out",
            user="alice",
        )
        assert out == "cpu-1"
        kube.wait_states({"cpu-1": "idle"}, timeout=30)
        assert kube.sh("slurmctld-0", "slurmctld", "squeue -h -o '%i %T'") == ""
        # slurmctld's own pings reach it too: a node it pings at a stale address turns idle*
        # (not responding) within a minute, and down* later
        while time.monotonic() - start < PING_WATCH_S:
            assert kube.states()["cpu-1"] == "idle", kube.states()
            time.sleep(5)
    finally:
        for holder in holders:
            subprocess.run(["docker", "rm", "-f", holder], capture_output=True, check=False)


def _job(kube, job: str) -> dict[str, str]:
    shown = kube.sh("slurmctld-0", "slurmctld", f"scontrol -o show job {job}")
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def _until(what: str, check, timeout: float) -> float:
    """Seconds until ``check()`` holds (polled every half second)."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.5)
    return time.monotonic() - start


def test_a_node_pod_deleted_under_a_job_ends_it_and_comes_back(deployed: K8sCluster) -> None:
    """Deleted with no grace (as an eviction or a lost kubelet does it): the job's processes are
    gone with the pod, the job ends NODE_FAIL, and the pod that replaces it is in service."""
    kube = deployed.kube
    job = submit(kube, "--no-requeue -N2 -o /dev/null --wrap 'srun sleep 600'")
    _until(
        "the step runs on both nodes",
        lambda: (
            f"{job}.0 cpu-[0-1]" in kube.sh("slurmctld-0", "slurmctld", "squeue -h -s -o '%i %N'")
        ),
        60,
    )
    kube.run("delete", "pod", "cpu-0", "--grace-period=0", "--force", "--wait=false")
    _until("the job ended", lambda: _job(kube, job)["JobState"] not in LIVE, 120)
    assert _job(kube, job)["JobState"] == "NODE_FAIL", _job(kube, job)
    idle = kube.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, timeout=120)
    assert idle < 60, f"idle {idle:.0f} s after the job ended"
    out = kube.sh("login-0", "login", "srun -N2 hostname", user="alice")
    assert sorted(out.split()) == ["cpu-0", "cpu-1"]


def test_a_node_pod_evicted_drains_and_lets_its_job_finish(deployed: K8sCluster) -> None:
    """A pod evicted through the Eviction API (what `kubectl drain` and a node pool upgrade
    do): its node is drained, with the Kubernetes node named, and takes no new job, the running
    one finishes, and the next pod is in service."""
    kube = deployed.kube
    kube.sh("login-0", "login", "rm -f ~/graceful.out", user="alice")
    job = submit(kube, "-w cpu-1 -o graceful.out --wrap 'sleep 15; echo finished'")
    _wait_running(kube, job)
    host = kube.run("get", "pod", "cpu-1", "-o", "jsonpath={.spec.nodeName}")

    def evict(pod: str):
        eviction = {
            "apiVersion": "policy/v1beta1",  # the lab's 1.20 server; policy/v1 from 1.22 on
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": kube.namespace},
        }
        path = f"/api/v1/namespaces/{kube.namespace}/pods/{pod}/eviction"
        return kube.proc("create", "--raw", path, "-f", "-", namespaced=False,
                         stdin=json.dumps(eviction))  # fmt: skip

    allowed = "jsonpath={.status.disruptionsAllowed}"
    _until("the budget allows one", lambda: kube.run("get", "pdb", "cpu", "-o", allowed) == "1", 60)
    taken = evict("cpu-1")
    assert taken.returncode == 0, taken.stderr
    # the node set's budget (disruption.max_unavailable: 1) holds the other pod while it is away
    refused = evict("cpu-0")
    assert refused.returncode != 0 and "disruption budget" in refused.stderr, refused
    reason = "sinfo -h -n cpu-1 -o '%t %E'"
    _until(
        "cpu-1 drained by its preStop",
        lambda: (
            f"slurmforge: pod stopping on kubernetes node {host}"
            in kube.sh("slurmctld-0", "slurmctld", reason)
        ),
        30,
    )
    later = submit(kube, "-w cpu-1 -o /dev/null --wrap true")
    assert _output(kube, "graceful.out", 60) == "finished"
    assert sacct(kube, [job])[job] == ("COMPLETED", "0:0")
    kube.wait_states({"cpu-1": "idle"}, timeout=120)
    # what was submitted to the draining node waited and ran on the new pod
    assert sacct(kube, [later])[later] == ("COMPLETED", "0:0")


def test_a_preemption_notice_requeues_the_job_at_once_and_its_end_resumes_the_nodes(
    deployed: K8sCluster,
) -> None:
    """GKE's taint on a Spot node about to be reclaimed, put on the lab's node: its Slurm nodes
    drain, naming it, and the job running there is requeued under its ID within seconds, with
    no pod deleted; the taint removed, the nodes are back in service."""
    kube = deployed.kube
    job = submit(kube, "-w cpu-0 -o /dev/null --wrap 'sleep 600'")
    _wait_running(kube, job)
    host = kube.run("get", "pod", "cpu-0", "-o", "jsonpath={.spec.nodeName}")
    taint = "cloud.google.com/impending-node-termination"
    pods = kube.run("get", "pods", "-o", "jsonpath={.items[*].metadata.uid}")
    kube.run("taint", "node", host, f"{taint}=true:NoSchedule", namespaced=False)
    try:
        shown = f"scontrol -o show job {job}"
        try:
            took = _until(
                f"job {job} requeued",
                lambda: " Restarts=1 " in kube.sh("slurmctld-0", "slurmctld", shown),
                30,
            )
        except AssertionError as exc:
            said = kube.run("logs", "deploy/node-watch", "--tail=20", check=False)
            raise AssertionError(f"{exc}; node-watch said:\n{said}") from None
        print(f"requeued {took:.1f} s after the taint")
        reasons = kube.sh("slurmctld-0", "slurmctld", "sinfo -h -N -o '%N %t %E'")
        said = f"slurmforge: kubernetes node {host}: preemption notice (taint {taint})"
        assert reasons.count(said) == 2 and "drain" in reasons, reasons  # both on the lab node
        # the same ID, waiting for a node: COMPLETING first, while its processes are killed
        # (for seconds on a loaded machine, where a fresh CI run failed a single look)
        asked = f"squeue -h -j {job} -o %T"
        _until(
            f"job {job} pending",
            lambda: kube.sh("login-0", "login", asked, user="alice") == "PENDING",
            60,
        )
    finally:
        kube.run("taint", "node", host, f"{taint}-", namespaced=False)
        # never left for the next tests: requeued, it runs again on cpu-0 once its BeginTime
        # is past (about two minutes)
        kube.sh("login-0", "login", f"scancel {job} || true", user="alice")
    kube.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, timeout=60)
    assert kube.run("get", "pods", "-o", "jsonpath={.items[*].metadata.uid}") == pods


def test_an_unhealthy_node_condition_drains_and_its_clearing_resumes(deployed: K8sCluster) -> None:
    """node-problem-detector's KernelDeadlock on the lab's node: its Slurm nodes drain (a running
    job goes on), and resume once the condition is False; an admin's drain is left alone."""
    kube = deployed.kube
    host = kube.run("get", "pod", "cpu-0", "-o", "jsonpath={.spec.nodeName}")

    def ctl(command: str) -> str:
        return kube.sh("slurmctld-0", "slurmctld", command)

    ctl("scontrol update NodeName=cpu-1 State=DRAIN Reason='admin: new cables'")
    job = submit(kube, "-w cpu-0 -o /dev/null --wrap 'sleep 600'")
    _wait_running(kube, job)

    def condition(status: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        deadlock = {
            "type": "KernelDeadlock", "status": status, "reason": "DockerHung",
            "message": "task docker:7 blocked for more than 120 seconds",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }  # fmt: skip
        patch = json.dumps({"status": {"conditions": [deadlock]}})
        kube.run("patch", "node", host, "--subresource=status", "-p", patch, namespaced=False)

    condition("True")
    try:
        said = f"slurmforge: kubernetes node {host}: condition KernelDeadlock"
        _until("cpu-0 drained", lambda: said in ctl("sinfo -h -n cpu-0 -o %E"), 30)
        assert ctl("sinfo -h -n cpu-1 -o %E") == "admin: new cables"
        state = kube.sh("login-0", "login", f"squeue -h -j {job} -o %T", user="alice")
        assert state == "RUNNING", state  # drained, not taken
    finally:
        condition("False")
    _until("cpu-0 resumed", lambda: ctl("sinfo -h -n cpu-0 -o %t") == "alloc", 30)
    assert ctl("sinfo -h -n cpu-1 -o %E") == "admin: new cables"
    kube.sh("login-0", "login", f"scancel {job}", user="alice")
    ctl("scontrol update NodeName=cpu-1 State=RESUME")
    kube.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, timeout=60)


def test_the_topology_follows_the_node_labels_and_reloads_without_a_restart(
    deployed: K8sCluster,
) -> None:
    """Unlabelled, the nodes are in the unplaced switch; the lab's node labelled with a zone and
    a rack, they are under that rack's switch, which a job asking for one switch gets; the rack
    relabelled, slurmctld takes the new tree without restarting."""
    kube = deployed.kube
    host = kube.run("get", "pod", "cpu-0", "-o", "jsonpath={.spec.nodeName}")
    started = "jsonpath={.status.containerStatuses[?(@.name=='slurmctld')].state.running.startedAt}"
    before = kube.run("get", "pod", "slurmctld-0", "-o", started)

    watcher = kube.run("get", "pods", "-l", "app.kubernetes.io/component=node-watch", "-o",
                       "jsonpath={.items[0].metadata.name}")  # fmt: skip
    pokes = iter(range(1000))

    def shows(line: str) -> bool:
        return line in kube.sh("slurmctld-0", "slurmctld", "scontrol show topology")

    def in_force(line: str) -> bool:
        # the kubelet refreshes a pod's ConfigMap files within a minute or two, and at once
        # when the pod is updated (as a deploy's config_sync does): poked, not waited for
        poke = f"slurmforge.test/poke={next(pokes)}"
        kube.run("annotate", "pod", "slurmctld-0", watcher, poke, "--overwrite")
        return shows(line)

    assert shows("SwitchName=unplaced Level=0 LinkSpeed=1 Nodes=cpu-[0-1]")
    zone, rack = LEVELS
    try:
        kube.run("label", "node", host, f"{zone}=z1", f"{rack}=r1", namespaced=False)
        took = _until("rack r1 in force", lambda: in_force("SwitchName=z1.r1 Level=0"), 180)
        print(f"labels in force after {took:.0f} s")
        assert shows("SwitchName=z1 Level=1") and not shows("SwitchName=unplaced")
        job = "sbatch -N2 --switches=1 --wait -o /dev/null --wrap 'srun hostname'"
        kube.sh("login-0", "login", job, user="alice")
        kube.run("label", "node", host, f"{rack}=r2", "--overwrite", namespaced=False)
        took = _until("rack r2 in force", lambda: in_force("SwitchName=z1.r2 Level=0"), 180)
        print(f"relabel in force after {took:.0f} s")
        assert not shows("SwitchName=z1.r1")
    finally:
        kube.run("label", "node", host, f"{zone}-", f"{rack}-", namespaced=False)
    assert kube.run("get", "pod", "slurmctld-0", "-o", started) == before  # no restart
    logs = kube.run("logs", "deploy/node-watch")
    assert "topology.conf written from the labels: SwitchName=z1.r2 Nodes=cpu-0,cpu-1" in logs


def test_a_deploy_that_changes_the_node_pods_replaces_them_after_their_jobs(
    deployed: K8sCluster,
) -> None:
    """A changed node pod template (an environment variable) under a job longer than
    disruption.max_wait: the deploy replaces the pods one at a time, the job is requeued under
    its ID when the wait is over, never NODE_FAIL, and both new pods are in service."""
    kube = deployed.kube
    job = submit(kube, "-w cpu-0 -o /dev/null --wrap 'sleep 600'")
    _wait_running(kube, job)
    old = kube.run("get", "pods", "cpu-0", "cpu-1", "-o", "jsonpath={.items[*].metadata.uid}")
    data = deployed.data()
    data["nodesets"][0]["env"] = {"SLURMFORGE_TEST_ROLL": "1"}
    data["disruption"] = {"max_wait": "5s"}
    deployed.write(data)
    proc = deployed.deploy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "note: replacing cpu-0 (its definition changed)" in said, said
    assert "note: replacing cpu-1 (its definition changed)" in said, said
    assert f"note: cpu-0: job {job} requeued (still running after 5 s)" in said, said
    new = kube.run("get", "pods", "cpu-0", "cpu-1", "-o", "jsonpath={.items[*].metadata.uid}")
    assert not set(new.split()) & set(old.split())  # both made again
    for pod in ("cpu-0", "cpu-1"):
        assert kube.sh(pod, "slurmd", "echo $SLURMFORGE_TEST_ROLL") == "1"
    shown = kube.sh("slurmctld-0", "slurmctld", f"scontrol -o show job {job}")
    # pending under its ID, or running again where the roll outlasted its BeginTime (about two
    # minutes after the requeue; a loaded machine's roll can)
    assert " Restarts=1 " in shown, shown
    assert re.search(r" JobState=(PENDING|RUNNING) ", shown), shown
    states = kube.sh("slurmctld-0", "slurmctld", f"sacct -n -X -D -j {job} -o State")
    assert "NODE_FAIL" not in states and "REQUEUED" in states, states
    kube.sh("login-0", "login", f"scancel {job}", user="alice")
    kube.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, timeout=60)


def test_a_job_is_held_to_its_memory_and_leaves_nothing_behind(deployed: K8sCluster) -> None:
    kube = deployed.kube
    # a daemon a job leaves behind ends with the job, and no exited process stays a zombie in
    # the node pod (slurmd is no init; the pod's is)
    escape = "setsid bash -c 'sleep 4242 & disown' < /dev/null > /dev/null 2>&1; sleep 1"
    kube.sh("login-0", "login", f"srun -w cpu-0 bash -c {shlex.quote(escape)}", user="alice")
    left = "ps -eo stat=,args= | grep -E '^Z|[s]leep 4242' || true"
    _until("nothing left on cpu-0", lambda: not kube.sh("cpu-0", "slurmd", left), 20)
    alloc = "python3 -c \"x = bytearray(600 << 20); x[::4096] = b'x' * len(x[::4096])\""
    job = submit(kube, f"--wait --mem=64M -o /dev/null --wrap {shlex.quote(alloc)} || true")
    assert sacct(kube, [job])[job][0] == "OUT_OF_MEMORY"
    cgroup = kube.sh("login-0", "login", "srun -n1 cat /proc/self/cgroup", user="alice")
    memory = next((ln for ln in cgroup.splitlines() if ":memory:" in ln), cgroup)
    assert re.search(r"/job_\d+/step_0(/user)?/task_0$", memory), cgroup


def _delete_holding_its_address(kube, pod: str) -> list[str]:
    """Delete a pod on the lab (pods sit on docker0, which hands out the lowest free address) so
    that it comes back under another address: with the kubelet paused, the pod is removed and its
    containers with it, and containers take the free addresses up to and including its old one.
    Returns those containers, for the caller to remove."""
    old = kube.pod_ip(pod)
    kubelet = int((LAB / "run" / "kubelet.pid").read_text())
    holders: list[str] = []
    os.kill(kubelet, signal.SIGSTOP)
    try:
        kube.run("delete", "pod", pod, "--grace-period=0", "--force", "--wait=false")
        labels = [f"io.kubernetes.pod.name={pod}", f"io.kubernetes.pod.namespace={kube.namespace}"]
        ids = _docker("ps", "-aq", *(a for lb in labels for a in ("--filter", f"label={lb}")))
        _docker("rm", "-f", *ids.split())
        for _ in range(32):
            holders.append(_docker("run", "-d", "k8s-lab/busybox:1.35", "sleep", "600"))
            fmt = "{{.NetworkSettings.IPAddress}}"
            if _docker("inspect", "-f", fmt, holders[-1]) == old:
                break
        else:
            pytest.fail(f"could not hold {old}")
    finally:
        os.kill(kubelet, signal.SIGCONT)
    return holders


def _docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_slurmctld_deleted_keeps_a_held_job_which_runs_after_release(
    deployed: K8sCluster,
) -> None:
    kube = deployed.kube
    out = kube.sh(
        "login-0", "login", "cd ~ && sbatch --hold -o held.out --wrap 'echo released'", user="alice"
    )
    job = re.search(r"Submitted batch job (\d+)", out).group(1)
    kube.run("delete", "pod", "slurmctld-0")
    kube.run("wait", "--for=condition=Ready", "pod/slurmctld-0", "--timeout=180s")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = kube.sh("login-0", "login", f"squeue -h -j {job} -o %T 2>&1 || true", user="alice")
        if state in ("PENDING", "RUNNING", "COMPLETED", "COMPLETING"):
            break
        time.sleep(2)
    assert state == "PENDING", state
    # as a user does when slurmctld, just back, says "try again in a bit" (the job's record in
    # the database is not yet linked: a fresh CI run's loaded cores)
    release = f"scontrol release {job} 2>&1 || true"
    until(f"job {job} released", lambda: "try again" not in kube.sh(
        "login-0", "login", release, user="alice"), 60)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = kube.sh("login-0", "login", "cat ~/held.out 2>/dev/null || true", user="alice")
        if done == "released":
            break
        time.sleep(2)
    assert done == "released"


def test_redeploy_with_a_changed_jail_keep_runs_a_new_populate(deployed: K8sCluster) -> None:
    """... and keeps the Secrets (never rotated), the job records and an operator's drain."""
    kube = deployed.kube
    secrets = kube.run("get", "secrets", "-o", "jsonpath={.items[*].metadata.uid}")
    job = submit(kube, "--wait --wrap true")
    before = set(kube.run("get", "jobs", "-o", "name").split())
    data = deployed.data()
    data["jail"] = {**data.get("jail", {}), "keep": ["/srv/"]}
    deployed.write(data)
    controller = ("slurmctld-0", "slurmctld")
    kube.sh(*controller, "scontrol update NodeName=cpu-1 State=DRAIN Reason='disk swap'")
    try:
        proc = deployed.deploy()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "note: cpu-1 stays drained (disk swap)" in proc.stderr
        assert kube.sh(*controller, "sinfo -h -N -n cpu-1 -o '%t|%E'") == "drain|disk swap"
    finally:
        kube.sh(*controller, "scontrol update NodeName=cpu-1 State=RESUME")
    new = set(kube.run("get", "jobs", "-o", "name").split()) - before
    assert len(new) == 1, (before, new)
    (populate,) = new
    assert kube.run("get", populate, "-o", "jsonpath={.status.succeeded}") == "1"
    kube.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, timeout=60)  # resumed, pinged
    assert kube.run("get", "secrets", "-o", "jsonpath={.items[*].metadata.uid}") == secrets
    assert sacct(kube, [job]) == {job: ("COMPLETED", "0:0")}


def test_scale_adds_idle_nodes_under_running_jobs_and_drains_before_removing(
    deployed: K8sCluster,
) -> None:
    kube = deployed.kube
    pods = ("slurmctld-0", "login-0", "cpu-0", "cpu-1")
    uids = {p: kube.run("get", "pod", p, "-o", "jsonpath={.metadata.uid}") for p in pods}
    kube.sh("login-0", "login", "rm -f ~/during.out ~/drained.out", user="alice")
    during = submit(kube, "-w cpu-0 -o during.out --wrap 'sleep 20; echo survived'")
    _wait_running(kube, during)

    proc = deployed.invoke("scale", "cpu=3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert kube.states()["cpu-2"] == "idle"
    # the node count is not part of what rolls pods: none was replaced, the job runs on
    assert {p: kube.run("get", "pod", p, "-o", "jsonpath={.metadata.uid}") for p in pods} == uids
    assert _output(kube, "during.out", 60) == "survived"
    # the login pod's jail knows the new node too, and slurmctld's topology has it
    try:
        out = kube.sh("login-0", "login", "srun -N3 hostname", user="alice")
    except AssertionError as exc:
        shown = kube.sh("slurmctld-0", "slurmctld", "scontrol show topology; "
                        "cat /etc/slurm/topology.conf; sinfo -N")  # fmt: skip
        said = kube.run("logs", "deploy/node-watch", "--tail=10", check=False)
        raise AssertionError(f"{exc}\nslurmctld:\n{shown}\nnode-watch:\n{said}") from None
    assert sorted(out.split()) == ["cpu-0", "cpu-1", "cpu-2"]

    drained = submit(kube, "-w cpu-2 -o drained.out --wrap 'sleep 15; echo finished'")
    _wait_running(kube, drained)
    proc = deployed.invoke("scale", "cpu=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "removed cpu-2" in proc.stdout
    # drained first: its job ran to the end before the pod went
    assert _output(kube, "drained.out", 0) == "finished"
    assert kube.states() == {"cpu-0": "idle", "cpu-1": "idle"}
    # its pod is gone when the scale returns
    gone = kube.run("get", "pod", "cpu-2", "-o", "name", check=False)
    assert gone == "", gone
    assert {p: kube.run("get", "pod", p, "-o", "jsonpath={.metadata.uid}") for p in pods} == uids


def _wait_running(kube, job: str) -> None:
    deadline = time.monotonic() + 60
    while (state := kube.sh("login-0", "login", f"squeue -h -j {job} -o %T", user="alice")) != (
        "RUNNING"
    ):
        assert time.monotonic() < deadline, f"job {job}: {state}"
        time.sleep(1)


def _output(kube, name: str, timeout: float) -> str:
    """~alice/NAME once it has a line, waiting up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        out = kube.sh("login-0", "login", f"cat ~/{name} 2>/dev/null || true", user="alice")
        if out or time.monotonic() >= deadline:
            return out
        time.sleep(2)


def test_the_site_settings_are_live_held_and_mounted(deployed: K8sCluster) -> None:
    """Last: the QoS and enforcement it deploys hold every later job to them."""
    kube = deployed.kube
    shipped = deployed.data()
    # a typo is refused before anything is applied
    typo = site(deployed.root, shipped)
    typo["slurm"]["conf"]["MaxArraySise"] = 10
    deployed.write(typo)
    configmap = kube.run("get", "configmap", "slurm-config", "-o", "jsonpath={.data}")
    proc = deployed.deploy()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "slurm.conf.MaxArraySise: Slurm" in proc.stderr and "did you mean MaxArraySize" in (
        proc.stderr
    )
    assert kube.run("get", "configmap", "slurm-config", "-o", "jsonpath={.data}") == configmap
    # and a PersistentVolumeClaim the site made, mounted writable
    projects = deployed.root / "projects"
    projects.mkdir()
    projects.chmod(0o1777)
    kube.run("apply", "-f", str(_claim(deployed.root, kube.namespace, projects)), namespaced=False)
    kube.made.append(f"persistentvolume/{kube.namespace}-projects")
    data = site(deployed.root, shipped)
    data["mounts"].append({"path": "/projects", "claim": "projects"})
    deployed.write(data)
    proc = deployed.deploy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = kube.sh("slurmctld-0", "slurmctld", "scontrol show config")
    assert re.search(r"^SchedulerParameters\s+= batch_sched_delay=0,bf_interval=5$", config, re.M)
    assert re.search(r"^MaxArraySize\s+= 5001$", config, re.M)
    assert re.search(r"^TopologyPlugin\s+= topology/tree$", config, re.M)
    topology = kube.sh("slurmctld-0", "slurmctld", "scontrol show topology")
    assert "SwitchName=leaf0" in topology
    qos = "sacctmgr -n -P show qos small format=name,priority,maxtrespu"
    assert kube.sh("slurmctld-0", "slurmctld", qos) == "small|10|cpu=1"
    # the prolog ran on both nodes before the job's step
    step = "srun -N2 bash -c 'cat /scratch/prolog-$SLURM_JOB_ID-$(hostname)' 2>/dev/null"
    lines = sorted(kube.sh("login-0", "login", step, user="alice").splitlines())
    assert [line.split()[1] for line in lines] == ["cpu-0", "cpu-1"], lines
    # the dataset: readable, not writable, from a job and from a login session
    assert kube.sh("login-0", "login", "srun cat /datasets/README", user="alice") == README.strip()
    write = "srun touch /datasets/mine 2>&1; touch /datasets/mine 2>&1; true"
    assert kube.sh("login-0", "login", write, user="alice").count("Read-only file system") == 2
    kube.sh("login-0", "login", "srun bash -c 'hostname > /projects/from-a-job'", user="alice")
    assert (projects / "from-a-job").read_text().strip() in ("cpu-0", "cpu-1")
    # a second job over the QoS's per-user CPU limit pends with its reason
    first = submit(kube, "--qos=small -n1 --wrap 'sleep 120'")
    second = submit(kube, "--qos=small -n1 --wrap 'sleep 120'")
    try:
        _wait_running(kube, first)
        deadline = time.monotonic() + 30
        reason = ""
        while reason != "PENDING QOSMaxCpuPerUserLimit" and time.monotonic() < deadline:
            time.sleep(1)
            reason = kube.sh("slurmctld-0", "slurmctld", f"squeue -h -j {second} -o '%T %r'")
        assert reason == "PENDING QOSMaxCpuPerUserLimit"
    finally:
        kube.sh("slurmctld-0", "slurmctld", f"scancel {first} {second}")


def _claim(root, namespace: str, directory) -> str:
    """A hostPath PersistentVolume and the claim bound to it, as a site makes its storage."""
    name = f"{namespace}-projects"
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(directory), "type": "Directory"},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "projects", "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    path = root / "projects.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [volume, claim]}))
    return str(path)
