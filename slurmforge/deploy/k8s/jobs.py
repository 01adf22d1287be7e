"""The roles that run as Jobs and CronJobs: the jail's populate, the GPU health check, the
scheduled backup."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from slurmforge import jail_contract
from slurmforge.deploy import roles
from slurmforge.deploy.k8s import controllers
from slurmforge.deploy.k8s.objects import (
    arch_affinity,
    claim,
    usr_claim,
)
from slurmforge.deploy.k8s.pods import PodRenderer
from slurmforge.deploy.roles import (
    BACKUP,
    BACKUP_CONF,
    CONTROLLER,
    CONTROLLER_STATE,
    DATABASE,
    DB_PASSWORD,
    HEALTH_CHECK,
    Role,
)

# the scheduled backups' claim, and where the backup pod mounts it
BACKUPS_CLAIM, BACKUPS_DIR = "backups", "/var/backups/slurmforge"


class JobRenderer(PodRenderer):
    def job(self, role: Role, arch: str | None = None) -> dict[str, Any]:
        """The jail populate, named after everything that defines it: a Job's template cannot
        change, so a changed jail.keep, image or digest makes a new Job (and the same inputs the
        same Job, which a redeploy leaves alone). With ``arch``: that arch's jail /usr, copied
        on a node of that arch into its own claim."""
        extra: dict[str, Any] = {}
        if arch is None:
            populate = jail_contract.populate_env(
                self.images.jail_digest, self.spec.kept, skip=self.spec.skipped
            )
            image = self.images.refs[role.image]
            volumes, mounts = self.volumes(role)
        else:
            digest = self.images.usr_digests[arch]
            populate = jail_contract.populate_env(digest, (), usr_only=True, skip=self.spec.skipped)
            image = self.images.refs[self.cluster.image_key(role.image, arch)]
            volumes = [self.jail_volume(arch)]
            mounts = [{"name": usr_claim(arch), "mountPath": jail_contract.ROOT}]
            extra["affinity"] = arch_affinity(arch)
        container = self.container(
            role, image, mounts, env=[{"name": k, "value": v} for k, v in populate.items()]
        )
        pod = self.pod_spec([container], volumes, wait=False, restartPolicy="OnFailure", **extra)
        spec = {
            "backoffLimit": 4,
            "template": {"metadata": {"labels": self.labels(role.name)}, "spec": pod},
        }
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        name = role.name if arch is None else f"{role.name}-usr-{arch}"
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self.meta(f"{name}-{digest[:12]}", role.name),
            "spec": spec,
        }

    def scheduled(self, role: Role, config_hash: str) -> dict[str, Any]:
        """The GPU health check: the jail's gpu-check as a job step on every GPU node in
        service, as `invoke gpu-check` runs it: srun inside the jail, from a pod set up like the
        login node. A node below the threshold drains itself; nodes it drained are resumed by
        `invoke gpu-check`, which reserves them first."""
        assert role.name == HEALTH_CHECK
        steps = []
        for ns in (ns for ns in self.spec.nodesets if ns.gpus):
            part = next(p.name for p in self.spec.partitions if ns.name in p.nodesets)
            steps.append(
                f"srun -p {part} -N {ns.replicas} --ntasks-per-node=1 --exclusive "
                f"--gres=gpu:{ns.gpus} -t 30 "
                f"/opt/slurmforge/gpu-check --min-busbw {self.spec.gpu.min_busbw:g}"
            )
        volumes, mounts = self.volumes(role)
        # the image's entrypoint starts munged and makes the jail's runtime mounts first
        args = ["chroot", jail_contract.ROOT, "/bin/bash", "-c", "\n".join(steps)]
        container = self.container(role, self.images.refs[role.image], mounts, args=args)
        pod = self.pod_spec([container], volumes, restartPolicy="Never")
        schedule = self.k8s.health_check.schedule
        return self.cron_job(role.name, schedule, pod, config_hash)

    def scheduled_backup(self, role: Role, config_hash: str) -> dict[str, dict[str, Any]]:
        """`invoke backup` on kubernetes.backup.schedule, from inside: a pod beside slurmctld
        (on its node: StateSave's claim is ReadWriteOnce where there is one controller) that
        mounts StateSave and the jail read-only and the secrets, dumps the database over the
        network as slurmdbd's user, and writes the archive to a claim of its own, keeping the
        newest kubernetes.backup.keep."""
        settings = self.k8s.backup
        assert role.name == BACKUP and settings.schedule is not None
        volumes, mounts = self.volumes(role)
        state = CONTROLLER_STATE
        volumes += [
            {
                "name": state.claim,
                "persistentVolumeClaim": {
                    "claimName": controllers.state_claim(self.spec),
                    "readOnly": True,
                },
            },
            {"name": BACKUPS_CLAIM, "persistentVolumeClaim": {"claimName": BACKUPS_CLAIM}},
        ]
        mounts += [
            {"name": state.claim, "mountPath": state.path, "readOnly": True},
            {"name": BACKUPS_CLAIM, "mountPath": BACKUPS_DIR},
        ]
        command = [
            "slurmforge-backup",
            f"{BACKUP_CONF.path}/plan.json",
            *("--out", BACKUPS_DIR, "--keep", str(settings.keep)),
        ]
        if roles.own_database(self.spec):
            command += ["--db-host", DATABASE, "--db-user", roles.OWN_DB_USER,
                        "--db-password-file", DB_PASSWORD.path]  # fmt: skip
        container = self.container(role, self.images.refs[role.image], mounts, args=[])
        container["command"] = command
        beside = {
            "labelSelector": {"matchLabels": self.selector(CONTROLLER)},
            "topologyKey": "kubernetes.io/hostname",
        }
        affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [beside]}}
        pod = self.pod_spec([container], volumes, restartPolicy="Never", affinity=affinity)
        claim_ = claim(self.meta(BACKUPS_CLAIM, BACKUP), "ReadWriteOnce", settings)
        return {
            f"pvc-{BACKUPS_CLAIM}.yaml": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                **claim_,
            },
            f"cronjob-{role.name}.yaml": self.cron_job(
                role.name, settings.schedule, pod, config_hash
            ),
        }

    # -- the compute nodes -------------------------------------------------------------------
