"""Two controllers, backup and restore on the k8s target, on one cluster with
``controller.replicas: 2`` (a primary and a backup slurmctld on one shared state claim).

First a storage class that makes single-node volumes is refused for the shared state before
anything is applied. Then, as an operator meets a lost controller: the backup's pod deleted
changes nothing a user sees; the primary's pod deleted while its node takes no new pods (as a
node lost or drained), with a job running and a user submitting, hands control to the backup
within SlurmctldTimeout and a few seconds; squeue, sacct, a token, REST and `invoke status`
answer; when the primary can start again it takes control back, and every accepted job
completes.

Then backup and restore: the cluster of one namespace, with a user, her file, jobs finished,
pending and held, and a QoS, backed up by `invoke backup --target k8s` and by its scheduled
backup (the CronJob's job, run three times: two kept); the newest scheduled archive copied out
by `invoke backup --from-schedule`; the namespace deleted; `invoke restore --target k8s` of that
archive into a second namespace; there the records, the queue with its job IDs, the user's file
and the QoS are those of the first."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from slurmforge.deploy.backup import archive as archives
from tests import rest_client
from tests.common import load_yaml, until
from tests.k8s import lab
from tests.k8s.kube import K8sCluster

pytestmark = pytest.mark.k8s

USER = "ada"
FIELDS = "JobID,State,ExitCode,User,Account,Submit,Start,End,NNodes,NodeList"
TAKEOVER = 10  # controller.failover_after: SlurmctldTimeout
# what a user submits meanwhile: one job at a time, each answer on its own line, until told to
STREAM = (
    "rm -f ~/stop; until [ -e ~/stop ]; do "
    "sbatch --parsable -o /dev/null --wrap true 2>&1 | tail -1; sleep 0.3; done"
)


def _sh(
    k8s_cluster: K8sCluster, namespace: str, command: str, user: str | None = None, login=False
) -> str:
    """``command`` on slurmctld, or in the login pod (in the jail as ``user``)."""
    pod, container = ("login-0", "login") if user or login else ("slurmctld-0", "slurmctld")
    with k8s_cluster.kube.in_namespace(namespace):
        return k8s_cluster.kube.sh(pod, container, command, user)


def _describe(k8s_cluster: K8sCluster, namespace: str) -> str:
    """The namespace's pods and claims, and the populate pod's log: why a restore failed."""
    kube = k8s_cluster.kube
    run = lambda *a: kube.run(*a, "--namespace", namespace, check=False, namespaced=False)  # noqa: E731
    pods = run("get", "pods,pvc", "-o", "wide")
    logs = run("logs", "-l", "app.kubernetes.io/component=jail-populate", "--tail=30")
    return f"\n--- {namespace}:\n{pods}\n--- populate:\n{logs}"


def _run(k8s_cluster: K8sCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return k8s_cluster.task(*args)


def _scheduled(k8s_cluster: K8sCluster, namespace: str, name: str) -> str:
    """The CronJob's job, as its schedule would start it (a 1.20 server serves no batch/v1
    CronJob, so deploy leaves the CronJob out there: the job is made from its template); its
    log."""
    kube = k8s_cluster.kube
    (path,) = (k8s_cluster.root / "out").rglob("cronjob-backup.yaml")
    cron = load_yaml(path.read_text())
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": namespace},
           "spec": cron["spec"]["jobTemplate"]["spec"]}  # fmt: skip
    kube.run("apply", "-f", "-", namespaced=False, stdin=json.dumps(job))
    done = kube.run("wait", "--namespace", namespace, "--for=condition=complete", f"job/{name}",
                    "--timeout=240s", check=False, namespaced=False)  # fmt: skip
    log = kube.run("logs", "--namespace", namespace, f"job/{name}", check=False, namespaced=False)
    if "condition met" not in done:
        pods = kube.run("describe", "pods", "--namespace", namespace, "-l", f"job-name={name}",
                        check=False, namespaced=False)  # fmt: skip
        pytest.fail(f"{done}\n{log}\n{pods[-3000:]}")
    return log


def _ha_data(k8s_cluster: K8sCluster) -> dict:
    data = k8s_cluster.data()
    data["controller"] = {"replicas": 2, "failover_after": TAKEOVER}
    return data


def test_a_state_class_one_node_mounts_is_refused_before_anything_is_applied(
    k8s_cluster: K8sCluster,
) -> None:
    kube = k8s_cluster.kube
    block = f"{kube.namespace}-block"
    storage_class = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                     "metadata": {"name": block}, "provisioner": "ebs.csi.aws.com"}  # fmt: skip
    kube.run("apply", "-f", "-", namespaced=False, stdin=json.dumps(storage_class))
    kube.made.append(f"storageclass/{block}")
    shipped = k8s_cluster.data()
    data = _ha_data(k8s_cluster)
    data["kubernetes"]["state"] = {"storage_class": block, "size": "1Gi"}
    k8s_cluster.write(data)
    try:
        proc = k8s_cluster.deploy()
    finally:
        k8s_cluster.write(shipped)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line, *_) = proc.stderr.splitlines()
    assert line == (
        f"error: {k8s_cluster.cluster_file}: kubernetes.state.storage_class: {block} "
        "(ebs.csi.aws.com) makes volumes one node mounts at a time; controller.replicas: 2 "
        "shares StateSaveLocation between two pods and needs a ReadWriteMany class (NFS, "
        "CephFS, a cloud file store)"
    ), proc.stderr
    assert "Traceback" not in proc.stderr
    # nothing applied: not even the namespace
    found = kube.run("get", "namespace", kube.namespace, check=False, namespaced=False)
    assert not found


@pytest.fixture(scope="module")
def ha(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> K8sCluster:
    """The cluster with two controllers and a backup schedule, deployed; a user and her file."""
    data = _ha_data(k8s_cluster)
    data["kubernetes"]["backup"] = {"schedule": "15 3 * * *", "keep": 2}
    k8s_cluster.write(data)
    if k8s_cluster.kube.lab:
        root = tmp_path_factory.mktemp("backup-pv")
        manifest, names = lab.volumes(root, data["name"], data["kubernetes"],
                                      claims=(lab.BACKUP_CLAIM, lab.SHARED_STATE))  # fmt: skip
        k8s_cluster.kube.run("apply", "-f", str(manifest), namespaced=False)
        k8s_cluster.kube.made += [f"persistentvolume/{n}" for n in names]
    proc = k8s_cluster.deploy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    source = k8s_cluster.kube.namespace
    _sh(k8s_cluster, source, f"chroot /jail createuser --non-interactive {USER}", login=True)
    _sh(k8s_cluster, source, "echo kept > ~/data.txt", USER)
    return k8s_cluster


def _user(ha: K8sCluster, command: str) -> str:
    return _sh(ha, ha.kube.namespace, command, USER)


def _ping(ha: K8sCluster) -> str:
    """`scontrol ping` on the login node: each controller, UP or DOWN."""
    return _user(ha, "scontrol ping || true")


def _state(ha: K8sCluster, job: str) -> str:
    return _user(ha, f"squeue -h -j {job} -o %T 2>/dev/null || true")


class Stream:
    """A user submitting one job after another on the login node (kubectl exec, in the
    background)."""

    def __init__(self, ha: K8sCluster) -> None:
        self.ha = ha
        kube = ha.kube
        argv = [lab.KUBECTL, *(["--context", kube.context] if kube.context else []),
                "--namespace", kube.namespace, "exec", "login-0", "-c", "login", "--",
                "chroot", "/jail", "su", "-", USER, "-c", STREAM]  # fmt: skip
        self.proc = subprocess.Popen(argv, env=kube.env, stdout=subprocess.PIPE, text=True)

    def stop(self) -> tuple[list[str], list[str]]:
        """Accepted job IDs, and every other answer sbatch gave."""
        _user(self.ha, "touch ~/stop")
        out, _ = self.proc.communicate(timeout=300)
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        return [x for x in lines if x.isdigit()], [x for x in lines if not x.isdigit()]


def test_the_backup_controllers_pod_deleted_changes_nothing(ha: K8sCluster) -> None:
    kube = ha.kube
    assert re.search(r"Slurmctld\(backup\) at slurmctld-1 is UP", _ping(ha)), _ping(ha)
    kube.run("delete", "pod", "slurmctld-1", "--wait=false")
    start = time.monotonic()
    assert sorted(_user(ha, "srun -N2 hostname").split()) == ["cpu-0", "cpu-1"]
    assert time.monotonic() - start < 15  # no wait for a controller
    until("the backup UP again", lambda: "at slurmctld-1 is UP" in _ping(ha), 120)


def test_the_primarys_pod_lost_hands_control_to_the_backup_and_no_job_is_lost(
    ha: K8sCluster,
) -> None:
    kube = ha.kube
    # runs until the test releases it, however long Kubernetes and the takeover take (a
    # `sleep 60` ended before the check on a loaded CI run)
    _user(ha, "rm -f ~/release")
    hold = "srun bash -c 'until [ -e ~/release ]; do sleep 1; done'"
    long = _user(ha, f'sbatch --parsable -N2 -o /dev/null --wrap "{hold}"')
    until("the long job running", lambda: _state(ha, long) == "RUNNING", 60)
    stream = Stream(ha)
    time.sleep(3)  # some accepted before the loss
    node = kube.run("get", "pod", "slurmctld-0", "-o", "jsonpath={.spec.nodeName}")
    # the primary's node takes no new pods (lost, or drained for maintenance): the pod that
    # replaces the deleted one waits, Pending, and the backup must take control
    kube.run("cordon", node, namespaced=False)
    try:
        uid = kube.run("get", "pod", "slurmctld-0", "-o", "jsonpath={.metadata.uid}")
        kube.run("delete", "pod", "slurmctld-0", "--wait=false")
        # the primary stops (SIGTERM) before its pod object goes; the backup's count starts
        # there (the kubelet's teardown of the pod is Kubernetes' time, not Slurm's)
        until("the primary's pod gone", lambda: kube.run(
            "get", "pod", "slurmctld-0", "-o", "jsonpath={.metadata.uid}", check=False) != uid,
            120)  # fmt: skip
        deleted = time.monotonic()
        _user(ha, "sbatch -o /dev/null --wrap true")  # accepted once the backup is in control
        took = time.monotonic() - deleted
        assert took < TAKEOVER + 30, f"the backup took {took:.1f} s"
        phase = kube.run("get", "pod", "slurmctld-0", "-o", "jsonpath={.status.phase}",
                         check=False)  # fmt: skip
        assert phase in ("", "Pending"), phase
        assert "slurmctld-0 is DOWN" in _ping(ha), _ping(ha)
        assert _state(ha, long) == "RUNNING"
        _user(ha, "squeue && sacct -X -n")
        jwt = re.search(r"^SLURM_JWT=(\S+)$", _user(ha, "scontrol token"), re.M).group(1)
        rest = kube.run("get", "pods", "-l", "app.kubernetes.io/component=slurmrestd",
                        "-o", "jsonpath={.items[0].status.podIP}")  # fmt: skip
        code, spec = rest_client.call(f"http://{rest}:6820/openapi/v3", user=USER, jwt=jwt)
        nodes = next(p for p in spec["paths"] if re.fullmatch(r"/slurm/v[0-9.]+/nodes/?", p))
        code, body = rest_client.call(f"http://{rest}:6820{nodes}", user=USER, jwt=jwt)
        assert code == 200 and {n["name"] for n in body["nodes"]} == {"cpu-0", "cpu-1"}, body
        # `invoke status` runs its commands in the controller pod that is up
        status = _run(ha, "status")
        assert status.returncode == 0 and "cpu-0" in status.stdout, status.stdout + status.stderr
        assert "slurmctld is not answering" not in status.stdout
        time.sleep(2)
        accepted, refused = stream.stop()
    finally:
        kube.run("uncordon", node, namespaced=False)
        stream.proc.kill()  # where the test failed before it stopped it
        # the long job ends, whatever happened (the module's next test needs both nodes)
        release = ("chroot", "/jail", "su", "-", USER, "-c", "touch ~/release")
        kube.run("exec", "login-0", "-c", "login", "--", *release, check=False)
    # sbatch waited for a controller, it never gave up; but one in flight when the primary got
    # SIGTERM is reset, says so and exits 1 (refused, never accepted: a CI run met it)
    assert len(refused) <= 1 and all("Connection reset by peer" in r for r in refused), refused
    assert len(accepted) >= 5, accepted
    # the primary, scheduled again, takes control back
    until("the primary in control",
          lambda: re.search(r"primary\) at slurmctld-0 is UP", _ping(ha)) is not None,
          180)  # fmt: skip
    jobs = [long, *accepted]
    sacct = f"sacct -X -n -P -o JobID,State -j {','.join(jobs)}"
    ended = lambda: dict(ln.split("|") for ln in _user(ha, sacct).splitlines())  # noqa: E731
    # a failure says which jobs had not ended, and what the queue and the nodes were doing
    shown = f"{sacct}; squeue -o '%i %T %r %N'; sinfo -N -o '%N %T %E'"
    until("every job ended", lambda: set(ended()) >= set(jobs) and all(
        s not in ("PENDING", "RUNNING", "COMPLETING") for s in ended().values()), 180,
        detail=lambda: _user(ha, shown))  # fmt: skip
    assert ended() == dict.fromkeys(jobs, "COMPLETED")


def test_a_cluster_backed_up_in_one_namespace_comes_back_in_another(
    ha: K8sCluster, tmp_path: Path
) -> None:
    k8s_cluster = ha
    source = k8s_cluster.kube.namespace
    # the primary in control (a failed test before may have left it starting)
    until("the primary in control",
          lambda: re.search(r"primary\) at slurmctld-0 is UP", _ping(ha)) is not None,
          180)  # fmt: skip

    def submit(namespace: str, *args: str) -> str:
        return _sh(k8s_cluster, namespace, f"cd && sbatch --parsable {' '.join(args)}", USER)

    done = submit(source, "--wrap", "true")
    later = submit(source, "--begin=now+2hours", "--wrap", "true")
    held = submit(source, "-H", "--wrap", "true")
    _sh(k8s_cluster, source, "sacctmgr -i add qos gold MaxWall=10")
    sacct = f"sacct -X -P -n -j {done} -o {FIELDS}"
    until("the first job's record", lambda: "|COMPLETED|" in _sh(k8s_cluster, source, sacct), 180)
    record = _sh(k8s_cluster, source, sacct)

    out = tmp_path / "backups"
    proc = _run(k8s_cluster, "backup", "--namespace", source, "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (taken,) = out.glob("*.tar")

    # the schedule's job, three times (a second apart at least: archives are named by the
    # second); the third removes the oldest
    logs = [_scheduled(k8s_cluster, source, f"backup-now-{i}") for i in range(3)]
    assert all("backup of cluster" in log for log in logs), logs
    assert "removed slurmforge-" in logs[2] and "keeping the newest 2" in logs[2], logs[2]
    fetched = tmp_path / "fetched"
    proc = _run(k8s_cluster, "backup", "--namespace", source, "--from-schedule",
                "--out", str(fetched))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "keeps 2 backups" in proc.stdout, proc.stdout
    (archive,) = fetched.glob("*.tar")
    assert archive.name in logs[2]
    # what the schedule took is what `invoke backup` takes: the same members, and the same
    # cluster files and secrets byte for byte
    ours, theirs = archives.verify(taken), archives.verify(archive)
    assert sorted(ours.members) == sorted(theirs.members)
    for member, info in ours.members.items():
        if member.startswith(("cluster/", "secrets/")):
            assert theirs.members[member]["sha256"] == info["sha256"], member
    assert (ours.slurm, ours.images) == (theirs.slurm, theirs.images)

    # the namespace is lost (the lab's one node holds one cluster at a time)
    k8s_cluster.kube.run("delete", "namespace", source, "--wait=true", "--timeout=300s",
                         namespaced=False)  # fmt: skip
    # a second namespace, with volumes of its own for its claims (the lab has no provisioner)
    target = f"{source}-r"
    if k8s_cluster.kube.lab:
        manifest, names = lab.volumes(tmp_path / "pv", target, k8s_cluster.data()["kubernetes"],
                                      claims=(*lab.CLAIMS, lab.SHARED_STATE))  # fmt: skip
        k8s_cluster.kube.run("apply", "-f", str(manifest), namespaced=False)
        k8s_cluster.kube.made += [f"persistentvolume/{n}" for n in names]
    try:
        proc = _run(k8s_cluster, "restore", str(archive), "--namespace", target,
                    "--out", str(tmp_path / "out"), "--timeout", "300")  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr + _describe(k8s_cluster, target)
        assert f"restored cluster {k8s_cluster.data()['name']} into namespace {target}" in (
            proc.stdout
        )
        assert _sh(k8s_cluster, target, sacct) == record
        queue = _sh(k8s_cluster, target, "squeue -h -o '%i|%T|%r'").splitlines()
        assert f"{later}|PENDING|BeginTime" in queue and f"{held}|PENDING|JobHeldUser" in queue
        assert int(submit(target, "--wrap", "true")) > int(held)
        assert _sh(k8s_cluster, target, "cat ~/data.txt", USER) == "kept"
        assert _sh(k8s_cluster, target, "sacctmgr -n -P show qos gold format=name") == "gold"
        # a second restore into the now restored namespace is refused (exit 2, one line)
        proc = _run(k8s_cluster, "restore", str(archive), "--namespace", target,
                    "--out", str(tmp_path / "out"))  # fmt: skip
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith("error: cluster ") and "already has state" in proc.stderr
    finally:
        k8s_cluster.kube.run("delete", "namespace", target, "--wait=false", check=False,
                             namespaced=False)  # fmt: skip
