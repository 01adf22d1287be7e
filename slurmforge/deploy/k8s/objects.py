"""Kubernetes objects as the `k8s` target writes them, whatever the role: names, labels and
metadata, security contexts, probes, resources, secrets' volumes and claims. workloads.py builds
on them; render.py and its role families fill them in from the roles table."""

from __future__ import annotations

import hashlib
from typing import Any

from slurmforge.deploy import roles
from slurmforge.deploy.k8s.images import Images
from slurmforge.deploy.roles import Probe, Secret
from slurmforge.deploy.spec.kubernetes import VolumeSpec
from slurmforge.deploy.spec.model import Cluster

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
# seconds between readiness probes: a daemon that starts after a wait (slurmctld
# for slurmdbd) is seen ready within this, and deploy's rollout waits end as soon
PROBE_PERIOD = 3
EXEC_PROBE_TIMEOUT = 10  # seconds an exec probe may take (probe())


def files_digest(files: dict[str, str]) -> str:
    return hashlib.sha256(
        "".join(f"{k}\0{v}\0" for k, v in sorted(files.items())).encode()
    ).hexdigest()[:16]


def probe(spec: Probe) -> dict[str, Any]:
    """A readiness probe: for a port, the kubelet's own connection (tcpSocket); otherwise an exec
    of the daemon's pid file check, of the kernel's socket table or of the role's own command.

    An exec probe runs through the engine (docker exec: about 80 ms of the machine's CPU each,
    every PROBE_PERIOD for a pod's whole life), a connection costs next to nothing. The roles
    probed by a connection are those whose daemons take an empty one silently (slurmdbd,
    slurmrestd, the exporter, Prometheus, slapd); slurmctld, slurmd and sshd log one as an error,
    so they keep their pid file checks, and the portal fetches its health page (roles/portal.py).
    An exec is given EXEC_PROBE_TIMEOUT, not the kubelet's 1 s: on a loaded node an exec of
    Python past that would be a failed probe, the pod taken out of its Service meanwhile.

    Not a startup probe, though it would exec only until the daemon is up: a kubelet marks a
    container with a startup probe and no readiness probe ready only at the pod's next sync, up
    to a minute after the probe passed (kubernetes/kubernetes#95140, #109802). Tried here, every
    rollout wait grew by that, and a restore's chain of them outlasted SlurmdTimeout."""
    if spec.listening and spec.connect:
        return {"tcpSocket": {"port": spec.listening}, "periodSeconds": PROBE_PERIOD}
    return {
        "exec": {"command": spec.argv()},
        "periodSeconds": PROBE_PERIOD,
        "timeoutSeconds": EXEC_PROBE_TIMEOUT,
    }


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
    """The objects of one cluster in one namespace: their names, labels and metadata."""

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

    def pod_annotations(self, containers: list[dict[str, Any]], config_hash: str) -> dict[str, str]:
        # AppArmor's default profile denies mount(2), which SYS_ADMIN holders here need; the
        # annotation works from Kubernetes 1.4 on (the securityContext field only from 1.30).
        out = {"slurmforge.io/config-hash": config_hash} if config_hash else {}
        for c in containers:
            if "SYS_ADMIN" in c["securityContext"]["capabilities"].get("add", ()):
                out[f"container.apparmor.security.beta.kubernetes.io/{c['name']}"] = "unconfined"
        return out

    def template(self, component: str, pod: dict[str, Any], config_hash: str, **extra: str):
        return {
            "metadata": {
                "labels": self.labels(component, **extra),
                "annotations": self.pod_annotations(pod["containers"], config_hash),
            },
            "spec": pod,
        }
