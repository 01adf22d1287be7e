"""The archives the k8s target's scheduled backup (CronJob ``backup``, snapshot.py) keeps on its
claim, brought to this machine: `invoke backup --target k8s --from-schedule [--out DIR]` copies
the newest, through a short-lived pod that mounts the claim read-only, and checks it whole
(archive.verify) before it gets its name, so a copy cut short leaves no file that looks complete.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from slurmforge.deploy.backup import archive
from slurmforge.deploy.backup.snapshot import size_text
from slurmforge.deploy.k8s.jobs import BACKUPS_CLAIM, BACKUPS_DIR
from slurmforge.deploy.k8s.kubectl import Kubectl
from slurmforge.deploy.k8s.manifests import Manifests
from slurmforge.deploy.k8s.objects import security, small_resources
from slurmforge.deploy.roles import BACKUP
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import ConfigError, DeployError

HELPER = "slurmforge-backups"


def fetch(cluster: Cluster, k: Kubectl, manifests: Manifests, out: Path) -> list[str]:
    name = cluster.name
    if cluster.spec.kubernetes.backup.schedule is None:
        raise ConfigError(
            f"{cluster.path}: kubernetes.backup.schedule is not set: cluster {name} has no "
            "scheduled backups to copy",
            hint="set it and deploy, or take one now: invoke backup",
        )
    manifests.write()  # the image the CronJob runs, as deploy rendered it
    cron = manifests.of("CronJob", BACKUP)
    image = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"]
    if k.run(k.argv("get", "pvc", BACKUPS_CLAIM, "-o", "name")).returncode:
        raise ConfigError(
            f"namespace {k.namespace} has no claim {BACKUPS_CLAIM}: cluster {name} keeps no "
            "scheduled backups there",
            hint="set kubernetes.backup.schedule and deploy, or take one now: invoke backup",
        )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": HELPER, "namespace": k.namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [{
                "name": "backups", "image": image,
                "command": ["sleep", "3600"],
                "securityContext": {**security(()), "runAsUser": 0},
                "resources": small_resources(),
                "volumeMounts": [{"name": "backups", "mountPath": BACKUPS_DIR, "readOnly": True}],
            }],
            "volumes": [{"name": "backups", "persistentVolumeClaim": {
                "claimName": BACKUPS_CLAIM, "readOnly": True}}],
        },
    }  # fmt: skip
    k.apply_objects([pod], "starting a pod that reads the backups")
    try:
        k.check(k.argv("wait", "--for=condition=Ready", f"pod/{HELPER}", "--timeout=300s"),
                "waiting for the pod that reads the backups")  # fmt: skip
        listing = k.check(
            k.argv("exec", HELPER, "--", "find", BACKUPS_DIR, "-maxdepth", "1", "-name",
                   archive.archive_name(name, "*"), "-printf", "%f %s\\n"),
            f"listing claim {BACKUPS_CLAIM}",
        )  # fmt: skip
        kept = sorted(tuple(line.split()) for line in listing.splitlines() if line.strip())
        if not kept:
            raise ConfigError(
                f"claim {BACKUPS_CLAIM} in namespace {k.namespace} holds no backup of cluster "
                f"{name} yet",
                hint=f"run one now: kubectl create job --namespace {k.namespace} "
                "--from=cronjob/backup backup-now",
            )
        newest = kept[-1][0]
        path = copy(k, f"{BACKUPS_DIR}/{newest}", out / newest)
    finally:
        # gone before the next copy starts one of the same name (sleep, as PID 1, would sit out
        # the default grace period)
        k.run(k.argv("delete", "pod", HELPER, "--grace-period=1", "--wait=true",
                     "--ignore-not-found"))  # fmt: skip
    lines = [f"claim {BACKUPS_CLAIM} in namespace {k.namespace} keeps {len(kept)} backups:"]
    lines += [f"  {n} {size_text(int(s)):>10}" for n, s in kept]
    lines.append(f"copied the newest, checked whole: {path}")
    return lines


def copy(k: Kubectl, source: str, path: Path) -> Path:
    """``source`` in the helper pod to ``path``, under a partial name until verify passed."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.parent / f".{path.name}{archive.PARTIAL}"
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            argv = k.argv("exec", HELPER, "--", "cat", source)
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            fh.flush()
            os.fsync(fh.fileno())
        if proc.returncode:
            err = proc.stderr.decode(errors="replace").strip()
            raise DeployError(f"copying {source} failed (exit {proc.returncode}): {err}")
        archive.verify(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
