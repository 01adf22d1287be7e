"""How the `k8s` target renders a cluster (the cluster file's ``kubernetes``; ignored by
`local`): storage, API versions, the login Service, images, scheduled jobs, node pods."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StrictBool, StrictInt, StringConstraints

from slurmforge import refs
from slurmforge.deploy.spec.fields import DNSName
from slurmforge.deploy.spec.node_watch import NodeWatchSpec
from slurmforge.errors import quote
from slurmforge.inputs import Model


def _quantity(value: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?", value):
        raise ValueError(
            f"expected a Kubernetes quantity such as 100Gi or 500M, got {quote(value)}"
        )
    return value


def _subdomain(value: str) -> str:
    label = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    if len(value) > 253 or not re.fullmatch(rf"{label}(\.{label})*", value):
        raise ValueError(
            "expected a storage class name (lower-case DNS subdomain, e.g. 'nfs-client'), "
            f"got {quote(value)}"
        )
    return value


def _kube_version(value: str) -> str:
    if not re.fullmatch(r"1\.[0-9]{2}", value):
        raise ValueError(f"expected a Kubernetes minor version such as '1.31', got {quote(value)}")
    return value


Quantity = Annotated[str, StringConstraints(strict=True), AfterValidator(_quantity)]
StorageClass = Annotated[str, StringConstraints(strict=True), AfterValidator(_subdomain)]
KubeVersion = Annotated[str, StringConstraints(strict=True), AfterValidator(_kube_version)]
Cron = Annotated[str, StringConstraints(strict=True), AfterValidator(refs.cron)]


class VolumeSpec(Model):
    storage_class: StorageClass | None = None
    """The claim's storage class; unset: the cluster's default storage class."""
    size: Quantity
    """The claim's requested size (a Kubernetes quantity: 50Gi)."""


class HealthCheckSpec(Model):
    schedule: Cron = "0 */6 * * *"
    """When the GPU health check's CronJob runs (cron: 5 fields, @hourly, @every 2h)."""
    enabled: StrictBool = True
    """Run the GPU health check's CronJob."""


class BackupSpec(VolumeSpec):
    """Scheduled backups (k8s): a CronJob writes an archive of the cluster to a claim of its
    own, as `invoke backup` would, and keeps the newest ``keep``. No schedule: none."""

    schedule: Cron | None = None
    """When a backup is taken (cron); unset: no scheduled backups."""
    keep: Annotated[StrictInt, Field(ge=1, le=1000)] = 7
    """How many of the newest archives are kept."""
    size: Quantity = "20Gi"
    """The backups' claim's size."""


class KubernetesSpec(Model):
    """How the `k8s` target renders this cluster (ignored by `local`)."""

    namespace: DNSName | None = None
    """The namespace the cluster is deployed into (default: the cluster's name)."""
    versions: tuple[KubeVersion, ...] = Field(("1.29", "1.30", "1.31", "1.32"), min_length=1)
    """The API versions the rendered manifests are validated against (strict schemas)"""
    jail: VolumeSpec = VolumeSpec(size="50Gi")
    """The shared root every node and login mounts: ReadWriteMany"""
    state: VolumeSpec = VolumeSpec(size="1Gi")
    """slurmctld's StateSaveLocation: ReadWriteOnce"""
    database: VolumeSpec = VolumeSpec(size="10Gi")
    """The cluster's own accounting database (MariaDB): ReadWriteOnce"""
    login_service: Literal["LoadBalancer", "NodePort", "ClusterIP"] = "LoadBalancer"
    """The Service type that exposes the login node's sshd (and the portal)."""
    registry: (
        Annotated[str, StringConstraints(strict=True), AfterValidator(refs.registry_prefix)] | None
    ) = None
    """Pull the images from this registry prefix instead of the set's (where `push --registry` put
    them); images are pinned by digest when build/images.lock.json has them"""
    image_pull_secrets: tuple[DNSName, ...] = ()
    """Secrets of the namespace the pods pull images with."""
    health_check: HealthCheckSpec = HealthCheckSpec()
    """The GPU health check's CronJob."""
    backup: BackupSpec = BackupSpec()
    """Scheduled backups."""
    node_grace_seconds: Annotated[StrictInt, Field(ge=0, le=86400)] = 60
    """A node pod being deleted (drain, rollout, eviction) drains its Slurm node and gives its
    running jobs this long to finish; batch jobs still running then are requeued under their
    IDs, the others cancelled with a word to their srun (the pod's terminationGracePeriodSeconds
    is 30 s more)"""
    node_watch: NodeWatchSpec = NodeWatchSpec()
    """Preemption notices and unhealthy conditions on the Kubernetes nodes, acted on in Slurm."""
    overcommit: StrictBool = False
    """Node pods request what their node set declares (cpus, memory_mb), as their limits, so
    Kubernetes places them where Slurm's view holds; true: they request next to nothing (the
    limits stay), as does node-watch's CPU, so a small cluster (kind on a laptop, a test lab) fits
    more nodes than cores"""
