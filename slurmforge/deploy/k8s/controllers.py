"""slurmctld on the `k8s` target: one pod (slurmctld-0, its StateSaveLocation on a claim of its
own), or with ``controller.replicas: 2`` a primary and a backup (slurmctld-0 and slurmctld-1 of
one StatefulSet) that share StateSaveLocation on one ReadWriteMany claim and prefer different
Kubernetes nodes. What talks to "the controller" (status, scale, backup, the deploy's waits)
runs in whichever of the two is up.

Kubernetes cannot say whether a storage class makes volumes more than one node can mount: the
claim would stay Pending, or bind and fail where the backup starts on another node. So before
anything is applied a class whose provisioner is known to make single-node volumes only
(block devices and node-local directories) is refused; any other is taken at its word.
"""

from __future__ import annotations

import json
from typing import Any

from slurmforge.deploy.k8s.kubectl import Kubectl, checked
from slurmforge.deploy.roles import CONTROLLER, CONTROLLER_STATE
from slurmforge.deploy.spec.model import Cluster, ClusterSpec
from slurmforge.errors import ConfigError

SHARED_STATE_CLAIM = f"{CONTROLLER}-{CONTROLLER_STATE.claim}"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"

# provisioners whose volumes one node mounts at a time (ReadWriteOnce only)
SINGLE_NODE = frozenset(
    {
        "kubernetes.io/aws-ebs",
        "ebs.csi.aws.com",
        "kubernetes.io/gce-pd",
        "pd.csi.storage.gke.io",
        "kubernetes.io/azure-disk",
        "disk.csi.azure.com",
        "kubernetes.io/cinder",
        "cinder.csi.openstack.org",
        "dobs.csi.digitalocean.com",
        "csi.hetzner.cloud",
        "rancher.io/local-path",
        "kubernetes.io/no-provisioner",
        "openebs.io/local",
        "local.csi.openebs.io",
        "topolvm.io",
        "lvm.csi.metal-stack.io",
        "rbd.csi.ceph.com",
    }
)


def pods(spec: ClusterSpec) -> list[str]:
    """slurmctld's pods, the primary first: each is a SlurmctldHost of that name."""
    return [f"{CONTROLLER}-{i}" for i in range(spec.controller.replicas)]


def hosts(spec: ClusterSpec) -> tuple[tuple[str, str], ...]:
    """(SlurmctldHost, its address) per controller: the pod's name in the headless Service."""
    return tuple((pod, f"{pod}.{CONTROLLER}") for pod in pods(spec))


def shared(spec: ClusterSpec) -> bool:
    return spec.controller.replicas > 1


def state_claim(spec: ClusterSpec) -> str:
    """The claim StateSaveLocation is on: pod slurmctld-0's of its volumeClaimTemplate, or the
    one both controllers mount."""
    return state_claim_for(spec.controller.replicas)


def anti_affinity(selector: dict[str, str]) -> dict[str, Any]:
    """The two controllers on different Kubernetes nodes where there are several (preferred:
    a one-node cluster still runs both)."""
    term = {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    }


def answering(k: Kubectl, spec: ClusterSpec) -> str:
    """The controller pod to run a command in: slurmctld-0, or where it is not running (being
    deleted, restarting, its node gone) the first that is. Slurm's commands there reach
    whichever controller is in control."""
    names = pods(spec)
    if not shared(spec):
        return names[0]
    up = set()
    for item in k.get("pods", **{"app.kubernetes.io/component": CONTROLLER}):
        statuses = item["status"].get("containerStatuses", [])
        running = any(s["name"] == CONTROLLER and "running" in s["state"] for s in statuses)
        if running and not item["metadata"].get("deletionTimestamp"):
            up.add(item["metadata"]["name"])
    return next((name for name in names if name in up), names[0])


def check_storage(cluster: Cluster, k: Kubectl) -> None:
    """Refuse, before anything is applied, a shared state claim on a storage class that makes
    single-node volumes. No class named and no default class: the claim binds to a volume made
    for it, whose access modes Kubernetes matches against ReadWriteMany."""
    if not shared(cluster.spec):
        return
    name = cluster.spec.kubernetes.state.storage_class
    key = f"{cluster.path}: kubernetes.state.storage_class"
    if name is None:
        argv = k.argv("get", "storageclasses", "-o", "json", namespaced=False)
        classes = json.loads(checked(k.run(argv), "listing the storage classes"))["items"]
        default = [
            c for c in classes if c["metadata"].get("annotations", {}).get(DEFAULT_CLASS) == "true"
        ]
        if not default:
            return
        found, name = default[0], default[0]["metadata"]["name"]
        key += f" (unset: the default class, {name})"
    else:
        proc = k.run(k.argv("get", "storageclass", name, "-o", "json", namespaced=False))
        if proc.returncode and "NotFound" in proc.stderr:
            raise ConfigError(
                f"{key}: no storage class {name} on this server; controller.replicas: 2 "
                "needs one whose volumes several nodes mount (ReadWriteMany)",
                hint="kubectl get storageclasses lists them",
            )
        found = json.loads(checked(proc, f"reading storage class {name}"))
    provisioner = found.get("provisioner", "")
    if provisioner in SINGLE_NODE:
        raise ConfigError(
            f"{key}: {name} ({provisioner}) makes volumes one node mounts at a time; "
            "controller.replicas: 2 shares StateSaveLocation between two pods and needs a "
            "ReadWriteMany class (NFS, CephFS, a cloud file store)",
            hint="name one in kubernetes.state.storage_class, or run controller.replicas: 1",
        )


def check_change(cluster: Cluster, k: Kubectl) -> None:
    """Refuse to move a deployed cluster between one controller and two: StateSaveLocation
    would move to another claim (and a StatefulSet's claim templates cannot change), so the
    queue would start empty. A backup restored with the new file carries it over."""
    found = k.get("statefulsets", **{"app.kubernetes.io/component": CONTROLLER})
    if not found:
        return
    running = found[0]
    was = 1 if running["spec"].get("volumeClaimTemplates") else 2
    if was != cluster.spec.controller.replicas:
        raise ConfigError(
            f"{cluster.path}: controller.replicas: namespace {k.namespace} runs {was} "
            f"controller{'s' if was > 1 else ''} with StateSaveLocation on claim "
            f"{state_claim_for(was)}; {cluster.spec.controller.replicas} would start from an "
            "empty one on another claim",
            hint="carry the state over: invoke backup, then invoke restore --force with the "
            "new cluster file",
        )


def state_claim_for(replicas: int) -> str:
    return SHARED_STATE_CLAIM if replicas > 1 else f"{CONTROLLER_STATE.claim}-{CONTROLLER}-0"
