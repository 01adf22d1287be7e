"""Bringing the Slurm config every running pod sees up to the applied ConfigMaps.

A pod sees a ConfigMap change once its kubelet re-syncs it, which by default takes up to a minute
or two; an update of the pod's own object (an annotation naming the config) makes the kubelet
sync it at once."""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Protocol

from slurmforge.deploy import roles
from slurmforge.deploy.k8s.kubectl import Kubectl
from slurmforge.deploy.k8s.manifests import Manifests
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import DeployError

CONFIG_ANNOTATION = "slurmforge.io/config"  # on a pod: the Slurm config it was told to load


class Host(Protocol):
    cluster: Cluster
    log: IO[str]
    k: Kubectl
    manifests: Manifests


def expected_config(objects: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Mount directory → file → sha256 of what the ConfigMaps hold now."""
    data = {o["metadata"]["name"]: o["data"] for o in objects.values() if o["kind"] == "ConfigMap"}
    return {
        config.path: {
            f: hashlib.sha256(v.encode()).hexdigest() for f, v in data[config.name].items()
        }
        for config in (roles.SLURM_CONF, roles.JAIL_CONF)
    }


def live_config(kube: Host) -> dict[str, dict[str, str]] | None:
    """What the server's Slurm ConfigMaps hold now, as expected_config gives it; None before
    the first deploy. Read before an apply: whether the apply changes the config the daemons
    run with is this against expected_config after it (the files a pod sees cannot say: its
    kubelet may have synced them before anyone looked)."""
    live = {o["metadata"]["name"]: {**o, "kind": "ConfigMap"} for o in kube.k.get("configmaps")}
    if any(c.name not in live for c in (roles.SLURM_CONF, roles.JAIL_CONF)):
        return None
    return expected_config(live)


def sync_config(kube: Host, timeout: float, leaving: Collection[str] = ()) -> bool:
    """Bring the config every running Slurm pod sees up to the applied ConfigMaps; True when
    any pod saw an older one (slurmctld and slurmd must then re-read theirs). The pods in
    ``leaving`` are left out: they are about to be replaced (roll.py), and one whose volumes
    changed may never see the new files.

    A pod sees a ConfigMap change once its kubelet re-syncs it, which by default takes up to
    a minute or two; an update of the pod's own object (an annotation naming the config)
    makes the kubelet sync it at once."""
    want = expected_config(kube.manifests.objects)
    mounting = {  # role → the watched config directories its pods mount
        role.name: [c.path for c in role.configs if c.path in want]
        for role in roles.running(kube.cluster.spec, "k8s")
        if role.workload in ("daemon", "nodes")
    }
    pods = {}
    for item in kube.k.get("pods"):
        component = item["metadata"]["labels"].get("app.kubernetes.io/component")
        if not mounting.get(component):
            continue
        if item["status"].get("phase") != "Running" or item["metadata"].get("deletionTimestamp"):
            continue
        if item["metadata"]["name"] in leaving:
            continue
        expect = {f"{d}/{f}": h for d in mounting[component] for f, h in want[d].items()}
        pods[item["metadata"]["name"]] = (item["spec"]["containers"][0]["name"], expect)

    def stale(pod: str) -> bool:
        container, expect = pods[pod]
        argv = ["sha256sum", *sorted(expect)]
        proc = kube.k.exec(pod, container, *argv)
        seen = {
            path: digest
            for digest, path in (ln.split(None, 1) for ln in proc.stdout.splitlines() if ln)
        }
        return seen != expect

    def until_synced(pod: str, deadline: float) -> bool:
        """Whether the pod sees the applied files by ``deadline``: one exec that checks them
        inside the pod each second (a kubectl per pod, where polling from here cost one per
        pod every second)."""
        container, expect = pods[pod]
        left = max(1, int(deadline - time.monotonic()))
        sums = "\n".join(f"{digest}  {path}" for path, digest in sorted(expect.items()))
        check = f"printf '%s\\n' {shlex.quote(sums)} | sha256sum --check --status"
        script = (
            f"end=$((SECONDS + {left})); until {check} 2> /dev/null; do "
            "[ $SECONDS -ge $end ] && exit 1; sleep 1; done"
        )
        return kube.k.exec(pod, container, "bash", "-c", script).returncode == 0

    with ThreadPoolExecutor(max_workers=8) as pool:
        older = [p for p, old in zip(pods, pool.map(stale, pods), strict=True) if old]
        if not older:
            return False
        digest = hashlib.sha256(json.dumps(want, sort_keys=True).encode()).hexdigest()[:16]
        kube.k.check(
            kube.k.argv("annotate", "pod", *older, f"{CONFIG_ANNOTATION}={digest}", "--overwrite"),
            "asking the kubelets to re-sync the Slurm config",
        )
        deadline = time.monotonic() + timeout
        synced = pool.map(lambda pod: until_synced(pod, deadline), older)
        waiting = [p for p, done in zip(older, synced, strict=True) if not done]
    if waiting:
        raise DeployError(
            f"after {timeout:.0f} s, these pods still see an older Slurm config: "
            + ", ".join(waiting)
        )
    print(f"updated the Slurm config of {', '.join(older)}", file=kube.log)
    return True
