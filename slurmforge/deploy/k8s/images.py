"""Which image references the `k8s` target's pods pull: moved to ``kubernetes.registry`` and
pinned by digest where build/images.lock.json (written by `invoke push`) has them."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmforge.deploy.roles import CONTROLLER, JAIL
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import ConfigError


@dataclass(frozen=True)
class Images:
    """component → the reference pods pull (by digest when the lock has it), and the jail's id
    (and, for node sets of another arch, the id of that arch's jail, whose /usr they see)."""

    refs: dict[str, str]
    jail_digest: str
    usr_digests: dict[str, str] = field(default_factory=dict)  # arch → its jail's id


def resolve(
    cluster: Cluster, lock: dict[str, str], local_ids: dict[str, str] | None = None
) -> Images:
    """Image references moved to ``kubernetes.registry`` and pinned by digest from ``lock``.

    The jail digest names the populate Job: the pushed digest when locked, else the local image
    id (``local_ids``); neither is an error that says which command makes one.
    """
    from slurmforge import push  # here: it brings the Docker SDK, which rendering does not need

    old = cluster.images[CONTROLLER].rsplit("/", 1)[0]  # the set's registry prefix
    registry = cluster.spec.kubernetes.registry
    moved = {c: push.retarget(ref, old, registry) for c, ref in cluster.images.items()}
    refs = {c: f"{m.rsplit(':', 1)[0]}@{lock[m]}" if m in lock else m for c, m in moved.items()}
    digests = {}
    for arch in (cluster.cell.arch, *cluster.other_arches):
        key = cluster.image_key(JAIL, arch)
        digests[arch] = lock.get(moved[key]) or (local_ids or {}).get(key)
        if not digests[arch]:
            raise ConfigError(
                f"image {cluster.images[key]} ({key}) is neither pushed nor built",
                hint=f"run: {cluster.build_hint}, then invoke push",
            )
    jail = digests.pop(cluster.cell.arch)
    return Images(refs, jail, digests)
