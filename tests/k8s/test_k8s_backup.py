"""Backup and restore on the k8s target: the cluster of one namespace, with a user, her file,
jobs finished, pending and held, and a QoS, backed up by `invoke backup --target k8s` and by its
scheduled backup (the CronJob's job, run three times: two kept); the newest scheduled archive
copied out by `invoke backup --from-schedule`; the namespace deleted; `invoke restore --target
k8s` of that archive into a second namespace; there the records, the queue with its job IDs, the
user's file and the QoS are those of the first."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from slurmforge.deploy.backup import archive as archives
from tests.conftest import until
from tests.k8s import lab
from tests.k8s.conftest import INVOKE, ROOT, K8sCluster

pytestmark = pytest.mark.k8s

USER = "ada"
FIELDS = "JobID,State,ExitCode,User,Account,Submit,Start,End,NNodes,NodeList"


def _sh(
    k8s_cluster: K8sCluster, namespace: str, command: str, user: str | None = None, login=False
) -> str:
    """``command`` on slurmctld, or in the login pod (in the jail as ``user``)."""
    kube = k8s_cluster.kube
    was, kube.namespace = kube.namespace, namespace
    try:
        pod, container = ("login-0", "login") if user or login else ("slurmctld-0", "slurmctld")
        return kube.sh(pod, container, command, user)
    finally:
        kube.namespace = was


def _describe(k8s_cluster: K8sCluster, namespace: str) -> str:
    """The namespace's pods and claims, and the populate pod's log: why a restore failed."""
    kube = k8s_cluster.kube
    run = lambda *a: kube.run(*a, "--namespace", namespace, check=False, namespaced=False)  # noqa: E731
    pods = run("get", "pods,pvc", "-o", "wide")
    logs = run("logs", "-l", "app.kubernetes.io/component=jail-populate", "--tail=30")
    return f"\n--- {namespace}:\n{pods}\n--- populate:\n{logs}"


def _run(k8s_cluster: K8sCluster, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--target", "k8s", "--cluster", str(k8s_cluster.cluster_file)]
    context = ["--context", k8s_cluster.kube.context] if k8s_cluster.kube.context else []
    return subprocess.run([*INVOKE, *args, *where, *context], cwd=ROOT, env=k8s_cluster.env,
                          capture_output=True, text=True, timeout=1200)  # fmt: skip


def _scheduled(k8s_cluster: K8sCluster, namespace: str, name: str) -> str:
    """The CronJob's job, as its schedule would start it (a 1.20 server serves no batch/v1
    CronJob, so deploy leaves the CronJob out there: the job is made from its template); its
    log."""
    kube = k8s_cluster.kube
    (path,) = (k8s_cluster.root / "out").rglob("cronjob-backup.yaml")
    cron = yaml.safe_load(path.read_text())
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": namespace},
           "spec": cron["spec"]["jobTemplate"]["spec"]}  # fmt: skip
    kube.run("apply", "-f", "-", namespaced=False, stdin=json.dumps(job))
    done = kube.run("wait", "--namespace", namespace, "--for=condition=complete", f"job/{name}",
                    "--timeout=300s", check=False, namespaced=False)  # fmt: skip
    log = kube.run("logs", "--namespace", namespace, f"job/{name}", check=False, namespaced=False)
    assert "condition met" in done, f"{done}\n{log}"
    return log


def test_a_cluster_backed_up_in_one_namespace_comes_back_in_another(
    k8s_cluster: K8sCluster, tmp_path: Path
) -> None:
    data = k8s_cluster.data()
    data["kubernetes"]["backup"] = {"schedule": "15 3 * * *", "keep": 2}
    k8s_cluster.write(data)
    if k8s_cluster.kube.lab:
        manifest, names = lab.volumes(tmp_path / "backup-pv", data["name"], data["kubernetes"],
                                      claims=(lab.BACKUP_CLAIM,))  # fmt: skip
        k8s_cluster.kube.run("apply", "-f", str(manifest), namespaced=False)
        k8s_cluster.kube.made += [f"persistentvolume/{n}" for n in names]
    proc = k8s_cluster.deploy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    source = k8s_cluster.kube.namespace
    _sh(k8s_cluster, source, f"chroot /jail createuser --non-interactive {USER}", login=True)
    _sh(k8s_cluster, source, "echo kept > ~/data.txt", USER)

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
        manifest, names = lab.volumes(tmp_path / "pv", target, k8s_cluster.data()["kubernetes"])
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
