"""`invoke restore --target k8s`: an archive (archive.py) back into a cluster in a namespace,
the backup's own or another. Its Secrets are made from the archive before anything mounts them;
the jail's claim, slurmctld's state claim and the portal hub's are made and filled by a
short-lived pod before the populate Job, slurmctld and the hub start (populate keeps the user
state and merges the accounts); the database StatefulSet starts alone and the dump is loaded
into it before slurmdbd starts; then the cluster is applied and waited for as `invoke deploy`
does.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from slurmforge.deploy import roles
from slurmforge.deploy.backup import archive, restoring
from slurmforge.deploy.k8s import apply, controllers
from slurmforge.deploy.k8s.apply import Host
from slurmforge.deploy.k8s.objects import JAIL_CLAIM
from slurmforge.deploy.k8s.secrets import DATABASE_CLAIM
from slurmforge.deploy.roles import CONTROLLER, CONTROLLER_STATE, DATABASE, PORTAL, PORTAL_DATA
from slurmforge.errors import ConfigError

HELPER = "slurmforge-restore"
KINDS = "statefulsets,deployments,daemonsets,jobs,cronjobs,pods,services,configmaps"


class Restore:
    def __init__(self, kube: Host, path: Path, manifest: archive.Manifest) -> None:
        self.kube = kube
        self.k = kube.k
        self.path = path
        self.manifest = manifest
        self.log = kube.log

    def claims(self) -> dict[str, dict[str, Any]]:
        """Claim name → the PersistentVolumeClaim the restore fills: the jail's,
        StateSaveLocation's (the one both controllers share, or the one slurmctld's StatefulSet
        would make for pod slurmctld-0: it takes one of that name), and the portal hub's (pod
        portal-0's) when the archive's database goes there."""
        state = controllers.state_claim(self.kube.cluster.spec)
        templates = {(CONTROLLER, CONTROLLER_STATE.claim): state}
        if restoring.restores_portal(self.kube.cluster, self.manifest):
            templates[(PORTAL, PORTAL_DATA.claim)] = self.portal_claim()
        out = {}
        for obj in self.kube.manifests.objects.values():
            if obj["kind"] == "PersistentVolumeClaim" and obj["metadata"]["name"] in (
                JAIL_CLAIM,
                state,
            ):
                out[obj["metadata"]["name"]] = obj
            if obj["kind"] != "StatefulSet":
                continue
            for template in obj["spec"].get("volumeClaimTemplates", []):
                name = templates.get((obj["metadata"]["name"], template["metadata"]["name"]))
                if name is not None:
                    claim = copy.deepcopy(template)
                    claim["metadata"]["name"] = name
                    claim["metadata"]["namespace"] = self.k.namespace
                    out[name] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim}
        return out

    @staticmethod
    def portal_claim() -> str:
        """The claim the portal's StatefulSet makes for its one pod."""
        return f"{PORTAL_DATA.claim}-{PORTAL}-0"

    def existing(self) -> list[str]:
        """What of this cluster the namespace already holds."""
        selector = f"app.kubernetes.io/instance={self.kube.cluster.name}"
        proc = self.k.run(self.k.argv("get", KINDS, "-l", selector, "-o", "name"))
        found = proc.stdout.split() if proc.returncode == 0 else []
        for secret in roles.cluster_secrets(self.kube.cluster.spec):
            if self.kube.secrets.data(secret) is not None:
                found.append(f"secret/{secret.secret}")
        proc = self.k.run(self.k.argv("get", "pvc", "-o", "name"))
        names = {f"persistentvolumeclaim/{n}" for n in (*self.claims(), DATABASE_CLAIM)}
        found += [n for n in (proc.stdout.split() if proc.returncode == 0 else []) if n in names]
        return found

    def remove(self, found: list[str]) -> None:
        """Delete what ``found`` names (workloads first, so that the claims are let go)."""
        ordered = sorted(found, key=lambda n: n.startswith("persistentvolumeclaim/"))
        what = f"deleting {len(ordered)} objects of cluster {self.kube.cluster.name}"
        self.k.check(self.k.argv("delete", "--wait=true", "--ignore-not-found", *ordered), what)

    def secrets(self) -> None:
        by_file = {s.file: s for s in roles.cluster_secrets(self.kube.cluster.spec)}
        for name in self.manifest.members:
            if name.startswith("secrets/") and name.removeprefix("secrets/") in by_file:
                with archive.member(self.path, name) as source:
                    self.kube.secrets.create(by_file[name.removeprefix("secrets/")], source.read())

    def fill(self) -> None:
        """A pod with the two claims mounted untars the archive's members into them."""
        claims = self.claims()
        self.k.apply_objects(list(claims.values()), "creating the claims to restore into")
        controller = self.kube.manifests.of("StatefulSet", CONTROLLER)
        image = controller["spec"]["template"]["spec"]["containers"][0]["image"]
        state = controllers.state_claim(self.kube.cluster.spec)
        mounts = {JAIL_CLAIM: "/restore/jail", state: "/restore/state"}
        portal = self.portal_claim() if self.portal_claim() in claims else None
        if portal is not None:
            mounts[portal] = "/restore/portal"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": HELPER, "namespace": self.k.namespace},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "restore", "image": image, "command": ["sleep", "3600"],
                    "securityContext": {"runAsUser": 0},
                    "volumeMounts": [{"name": f"v{i}", "mountPath": m}
                                     for i, m in enumerate(mounts.values())],
                }],
                "volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                            for i, c in enumerate(mounts)],
            },
        }  # fmt: skip
        self.k.apply_objects([pod], "starting the restore pod")
        try:
            self.k.check(self.k.argv("wait", "--for=condition=Ready", f"pod/{HELPER}",
                                     "--timeout=300s"), "waiting for the restore pod")  # fmt: skip
            for member, where in (("jail.tar", "/restore/jail"), ("state.tar", "/restore/state")):
                argv = self.k.argv("exec", "-i", HELPER, "--", "tar", "--numeric-owner",
                                   "-xpf", "-", "-C", where)  # fmt: skip
                what = f"{member} into {where}"
                restoring.feed_member(self.path, self.manifest, member, argv, what, self.log)
            if portal is not None:  # the hub's, before it first starts
                write = f"umask 077 && cat > /restore/portal/{roles.PORTAL_DB}"
                argv = self.k.argv("exec", "-i", HELPER, "--", "sh", "-c", write)
                what = f"{restoring.PORTAL_MEMBER} into {portal}"
                restoring.feed_member(self.path, self.manifest, restoring.PORTAL_MEMBER, argv, what,
                                   self.log)  # fmt: skip
        finally:
            self.k.run(self.k.argv("delete", "pod", HELPER, "--wait=true", "--ignore-not-found"))

    def database(self) -> None:
        """The database StatefulSet alone, then the dump into it."""
        if "database.sql" not in self.manifest.members:
            return
        objects = [
            o
            for o in self.kube.manifests.objects.values()
            if o["metadata"]["name"] == DATABASE and o["kind"] in ("StatefulSet", "Service")
        ]
        self.k.apply_objects(objects, "starting the accounting database")
        self.k.check(self.k.argv("rollout", "status", f"statefulset/{DATABASE}", "--timeout=600s"),
                     "waiting for the accounting database")  # fmt: skip
        restoring.load_dump(self.kube, self.path, self.manifest)


def restore(kube: Host, path: Path, force: bool, timeout: float) -> list[str]:
    start = time.monotonic()
    manifest = archive.verify(path)
    restoring.admit(kube.cluster, path, manifest)
    kube.manifests.write()  # images not found are refused here, before anything changes
    kube.manifests.validate()
    restoring.restores_directory(kube.cluster, manifest)  # none here: a note says so
    controllers.check_storage(kube.cluster, kube.k)
    job = Restore(kube, path, manifest)
    found = job.existing()
    if found and not force:
        shown = f"{', '.join(found[:4])}{' …' if len(found) > 4 else ''}"
        raise ConfigError(
            f"cluster {kube.cluster.name} already has state in namespace {kube.k.namespace} "
            f"({shown}): a restore would replace it",
            hint="restore into another --namespace, or with --force to delete it first",
        )
    if found:
        job.remove(found)
    apply.apply_files(kube, kube.manifests.named("Namespace"))
    job.secrets()
    job.fill()
    job.database()
    shown = apply.apply(kube, timeout)
    took = time.monotonic() - start
    return [
        f"restored cluster {manifest.cluster} into namespace {kube.k.namespace} from {path} "
        f"(backup of {manifest.created}, Slurm {manifest.slurm}) in {took:.1f} s",
        *(f"note: {n}" for n in manifest.notes),
        shown,
    ]
