"""Kubernetes objects as the `k8s` target writes them, whatever the role: labels, security
contexts, probes, volumes, Services and the workloads that run pods. k8s_render.py fills them in
from the roles table."""

from __future__ import annotations

import hashlib
import shlex
from typing import Any

from slurmforge import jail_contract
from slurmforge.deploy import roles
from slurmforge.deploy.k8s.images import Images
from slurmforge.deploy.roles import JAIL, Probe, Secret
from slurmforge.deploy.spec.model import Cluster, VolumeSpec

PART_OF = "slurmforge"
JAIL_CLAIM = "jail"
ARCH_LABEL = "kubernetes.io/arch"  # the kubelet's own label of its node's arch


def usr_claim(arch: str) -> str:
    """The claim of another arch's jail /usr (jail_contract.PART_ENV)."""
    return f"{JAIL_CLAIM}-usr-{arch}"


def arch_affinity(arch: str, terms: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Required node affinity: nodes of ``arch`` (and ``terms``, the node set's own)."""
    expressions = [*(terms or []), {"key": ARCH_LABEL, "operator": "In", "values": [arch]}]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


PSA_MODES = ("enforce", "audit", "warn")
# seconds between readiness probes (cheap execs): a daemon that starts after a wait (slurmctld
# for slurmdbd) is seen ready within this, and deploy's rollout waits end as soon
PROBE_PERIOD = 3


def files_digest(files: dict[str, str]) -> str:
    return hashlib.sha256(
        "".join(f"{k}\0{v}\0" for k, v in sorted(files.items())).encode()
    ).hexdigest()[:16]


def probe(spec: Probe) -> dict[str, Any]:
    """A readiness probe that makes no connection: an exec of the daemon's pid file check, of
    the kernel's socket table, or of the role's own command."""
    if spec.pid_file:
        command = ["sh", "-c", f"kill -0 $(cat {spec.pid_file})"]
    elif spec.listening:
        pattern = f":{spec.listening:04X} 0+:0000 0A "
        command = ["grep", "-qE", pattern, "/proc/net/tcp", "/proc/net/tcp6"]
    else:
        command = list(spec.command)
    return {"exec": {"command": command}, "periodSeconds": PROBE_PERIOD}


def small_resources() -> dict[str, Any]:
    return {
        "requests": {"cpu": "10m", "memory": "16Mi"},
        "limits": {"cpu": "100m", "memory": "64Mi"},
    }


def resources(spec: roles.Resources) -> dict[str, Any]:
    (cpu, memory), (max_cpu, max_memory) = spec.requests, spec.limits
    return {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": max_cpu, "memory": max_memory},
    }


def secret_env(secret: Secret) -> dict[str, str]:
    return {"name": secret.env, "value": secret.path}


def secret_volume(secret: Secret) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Secret's volume (its one file, root's alone) and its read-only mount."""
    volume = {
        "name": secret.secret,
        "secret": {
            "secretName": secret.secret,
            "defaultMode": 0o400,
            "items": [{"key": secret.file, "path": secret.file}],
        },
    }
    return volume, {"name": secret.secret, "mountPath": secret.dir, "readOnly": True}


def security(
    caps: tuple[str, ...], runs_users: bool = False, runs_containers: bool = False
) -> dict[str, Any]:
    """Only ``caps``. ``runs_users``: the container runs users' sessions or jobs, whose setuid
    programs (su, sudo, ping in the jail) need privilege escalation; the API server also refuses
    allowPrivilegeEscalation: false next to SYS_ADMIN. ``runs_containers``: jobs start
    containers (enroot through pyxis), whose pivot_root(2) inside a user namespace the runtime's
    default seccomp profile refuses, so none is applied, as on a bare-metal node."""
    capabilities: dict[str, list[str]] = {"drop": ["ALL"]}
    if caps:
        capabilities["add"] = sorted(set(caps))
    return {
        "allowPrivilegeEscalation": runs_users or "SYS_ADMIN" in caps,
        "privileged": False,
        "capabilities": capabilities,
        "seccompProfile": {"type": "Unconfined" if runs_containers else "RuntimeDefault"},
    }


def claim(metadata: dict[str, Any], mode: str, volume: VolumeSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": [mode],
        "resources": {"requests": {"storage": volume.size}},
    }
    if volume.storage_class:
        spec["storageClassName"] = volume.storage_class
    return {"metadata": metadata, "spec": spec}


class ObjectBuilder:
    """The objects of one cluster in one namespace."""

    def __init__(self, cluster: Cluster, images: Images, namespace: str | None = None) -> None:
        self.cluster = cluster
        self.spec = cluster.spec
        self.k8s = cluster.spec.kubernetes
        self.images = images
        self.namespace = namespace or self.k8s.namespace or cluster.name
        self.version = cluster.cell.slurm

    def labels(self, component: str, **extra: str) -> dict[str, str]:
        return {
            **self.selector(component),
            "app.kubernetes.io/version": self.version,
            "app.kubernetes.io/part-of": PART_OF,
            "app.kubernetes.io/managed-by": "slurmforge",
            **extra,
        }

    def selector(self, component: str, **extra: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "slurm",
            "app.kubernetes.io/instance": self.cluster.name,
            "app.kubernetes.io/component": component,
            **extra,
        }

    def meta(self, name: str, component: str, **extra: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": self.labels(component, **extra),
        }

    def namespace_object(self) -> dict[str, Any]:
        """Pod Security Admission: the compute and login pods add SYS_ADMIN and run without
        seccomp/AppArmor confinement (the jail's mounts, users' containers), which only the
        `privileged` level admits; `baseline` and `restricted` would refuse them. Servers older
        than 1.23 ignore the labels."""
        level = {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in PSA_MODES}
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": self.namespace, "labels": {**self.labels("namespace"), **level}},
        }

    def config_map(self, name: str, files: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": self.meta(name, "config"),
            "data": dict(sorted(files.items())),
        }

    def jail_claim(self, arch: str | None = None) -> dict[str, Any]:
        """The jail's claim; with ``arch``, the claim of that arch's /usr."""
        name = JAIL_CLAIM if arch is None else usr_claim(arch)
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            **claim(self.meta(name, JAIL), "ReadWriteMany", self.k8s.jail),
        }

    def pod_annotations(self, containers: list[dict[str, Any]], config_hash: str) -> dict[str, str]:
        # AppArmor's default profile denies mount(2), which SYS_ADMIN holders here need; the
        # annotation works from Kubernetes 1.4 on (the securityContext field only from 1.30).
        out = {"slurmforge.io/config-hash": config_hash} if config_hash else {}
        for c in containers:
            if "SYS_ADMIN" in c["securityContext"]["capabilities"].get("add", ()):
                out[f"container.apparmor.security.beta.kubernetes.io/{c['name']}"] = "unconfined"
        return out

    def jail_volume(self, arch: str | None = None) -> dict[str, Any]:
        """The jail's volume; with ``arch``, that of that arch's /usr."""
        if arch is None:
            return {"name": "jail", "persistentVolumeClaim": {"claimName": JAIL_CLAIM}}
        return {"name": usr_claim(arch), "persistentVolumeClaim": {"claimName": usr_claim(arch)}}

    def usr_mount(self, arch: str, read_only: bool = False) -> dict[str, Any]:
        """Another arch's /usr over the jail's, as that arch's nodes see the jail."""
        mount = {"name": usr_claim(arch), "mountPath": jail_contract.ROOT + jail_contract.USR}
        return {**mount, "readOnly": True} if read_only else mount

    def wait_for_jail(self, arch: str | None = None) -> dict[str, Any]:
        """An init container that holds the pod until the jail holds this digest's populate
        (and, on a node of another ``arch``, the jail's /usr for it holds that arch's)."""
        waits = [(jail_contract.sentinel(jail_contract.ROOT), self.images.jail_digest)]
        mounts = [{"name": "jail", "mountPath": jail_contract.ROOT, "readOnly": True}]
        image = self.images.refs[JAIL]
        if arch is not None:
            usr = jail_contract.ROOT + jail_contract.USR
            waits.append((jail_contract.sentinel(usr), self.images.usr_digests[arch]))
            mounts.append(self.usr_mount(arch, read_only=True))
            image = self.images.refs[self.cluster.image_key(JAIL, arch)]
        script = "; ".join(
            f"until grep -qxF {shlex.quote(digest)} {marker} 2>/dev/null; do "
            f"echo 'waiting for the jail populate of {digest[:19]}'; sleep 1; done"
            for marker, digest in waits
        )
        return {
            "name": "wait-for-jail",
            "image": image,
            "command": ["/bin/sh", "-c", script],
            "volumeMounts": mounts,
            "securityContext": security(()),
            "resources": small_resources(),
        }

    def pod_spec(
        self,
        containers: list[dict],
        volumes: list[dict],
        wait: bool = True,
        usr_arch: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """``wait``: hold the pod until the jail is populated (all but populate mount it);
        ``usr_arch``: and its /usr for that arch (a node of another arch than the jail's)."""
        spec: dict[str, Any] = {
            **({"initContainers": [self.wait_for_jail(usr_arch)]} if wait else {}),
            "containers": containers,
            "volumes": volumes,
            "enableServiceLinks": False,
            # no pod here talks to the Kubernetes API: none gets a service-account token
            "automountServiceAccountToken": False,
            **extra,
        }
        if self.k8s.image_pull_secrets:
            spec["imagePullSecrets"] = [{"name": n} for n in self.k8s.image_pull_secrets]
        return spec

    def headless(self, name: str, component: str, ports: list[roles.Port]) -> dict[str, Any]:
        """Pods found by name, each at its own address (slurmctld's ``<pod>.<service>``, the
        nodes', slurmdbd's and MariaDB's, which are reconnected to by name after a restart)."""
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(name, component),
            "spec": {
                "clusterIP": "None",
                # slurmctld resolves every node when it starts, ready or not
                "publishNotReadyAddresses": True,
                "selector": self.selector(component),
                "ports": [
                    {"name": p.name, "port": p.number, "targetPort": p.number, "protocol": "TCP"}
                    for p in ports
                ],
            },
        }

    def published(self, name: str, ports: list[roles.Port]) -> dict[str, Any]:
        """Where users reach a role: a Service of kubernetes.login_service's type."""
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(name, name),
            "spec": {
                "type": self.k8s.login_service,
                "selector": self.selector(name),
                "ports": [
                    {
                        "name": p.name,
                        "port": p.service_port or roles.published(self.spec, p),
                        "targetPort": p.number,
                        "protocol": "TCP",
                    }
                    for p in ports
                ],
            },
        }

    def template(self, component: str, pod: dict[str, Any], config_hash: str, **extra: str):
        return {
            "metadata": {
                "labels": self.labels(component, **extra),
                "annotations": self.pod_annotations(pod["containers"], config_hash),
            },
            "spec": pod,
        }

    def stateful_set(
        self,
        name: str,
        component: str,
        replicas: int,
        pod: dict[str, Any],
        config_hash: str,
        claims: list[dict[str, Any]] | None = None,
        service: str | None = None,
        **extra: str,
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "serviceName": service or name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": self.selector(component, **extra)},
            "template": self.template(component, pod, config_hash, **extra),
        }
        if claims:
            spec["volumeClaimTemplates"] = claims
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": self.meta(name, component, **extra),
            "spec": spec,
        }

    def deployment(self, name: str, pod: dict[str, Any], config_hash: str) -> dict[str, Any]:
        """One pod of a stateless daemon, replaced (never doubled) on a change."""
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.meta(name, name),
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": self.selector(name)},
                "template": self.template(name, pod, config_hash),
            },
        }

    def cron_job(
        self, name: str, schedule: str, pod: dict[str, Any], config_hash: str
    ) -> dict[str, Any]:
        return {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": self.meta(name, name),
            "spec": {
                "schedule": schedule,
                "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 3,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": {
                    "spec": {"backoffLimit": 0, "template": self.template(name, pod, config_hash)}
                },
            },
        }
