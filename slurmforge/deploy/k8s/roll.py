"""Node pods replaced after their jobs (k8s): a node set's StatefulSet does not replace a pod
whose template changed by itself (updateStrategy OnDelete); a deploy does, in replace.roll's
order: ``disruption.max_unavailable`` pods of a set at a time, each taken by node-state in its
slurmd container (drained, its jobs given ``disruption.max_wait``, the rest requeued or told and
cancelled), then deleted (its preStop finds nothing left to wait for), and its successor waited
for until its node is in service. A pod deleted by anyone else (an eviction, a node drain) still
has its preStop and ``kubernetes.node_grace_seconds``.

An upgrade to another Slurm series replaces every node pod of a set at once, each with
``node_grace_seconds``, as the local target drains every node for it (how-to/node-updates.md).
"""

from __future__ import annotations

import time
from typing import Any

from slurmforge.deploy import replace, roles
from slurmforge.deploy.k8s import stuck
from slurmforge.deploy.spec.disruption import NODE_STATE, REPLACE_REASON
from slurmforge.errors import DeployError

REVISION = "controller-revision-hash"  # the StatefulSet's label on each pod it made


def _ordinal(pod: str) -> int:
    return int(pod.rsplit("-", 1)[1])


def wait_sets(kube: Any, timeout: float) -> None:
    """Until every node set's StatefulSet has as many ready pods as it wants (a first deploy's,
    a scale-up's: `rollout status` serves no OnDelete set); a timeout names the pods that are
    not ready and why."""
    component = {"app.kubernetes.io/component": roles.NODE}
    deadline = time.monotonic() + timeout
    while True:
        short = [
            s["metadata"]["name"]
            for s in kube.k.get("statefulsets", **component)
            if s.get("status", {}).get("readyReplicas", 0) < s["spec"].get("replicas", 0)
        ]
        if not short:
            return
        if time.monotonic() > deadline:
            lines = "".join(f"\n  {ln}" for ln in stuck.explain(kube.k))
            raise DeployError(
                f"the pods of node sets {', '.join(short)} were not ready within "
                f"{timeout:.0f} s" + (f"\n  pods not ready:{lines}" if lines else "")
            )
        time.sleep(2)


def changed(kube: Any, timeout: float) -> dict[str, list[str]]:
    """Node set → its running pods made from an older template than the set's (its
    updateRevision, once the controller has seen the applied one)."""
    component = {"app.kubernetes.io/component": roles.NODE}
    deadline = time.monotonic() + timeout
    while True:
        sets = {s["metadata"]["name"]: s for s in kube.k.get("statefulsets", **component)}
        if all(
            s.get("status", {}).get("observedGeneration", 0) >= s["metadata"]["generation"]
            for s in sets.values()
        ):
            break
        if time.monotonic() > deadline:
            raise DeployError("the node sets' StatefulSets did not take the applied template")
        time.sleep(1)
    pods = kube.k.get("pods", **component)
    out: dict[str, list[str]] = {}
    for ns in kube.cluster.spec.nodesets:
        revision = sets.get(ns.name, {}).get("status", {}).get("updateRevision")
        names = [
            p["metadata"]["name"]
            for p in pods
            if p["metadata"].get("labels", {}).get("slurmforge.io/nodeset") == ns.name
            and REVISION in p["metadata"]["labels"]
            and p["metadata"]["labels"][REVISION] != revision
            and p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        if revision and names:
            out[ns.name] = sorted(names, key=_ordinal)
    return out


def roll(
    kube: Any,
    sets: dict[str, list[str]],
    kept: dict[str, str],
    timeout: float,
    upgrading: bool = False,
) -> None:
    """Replace the pods of ``sets`` (``changed``'s)."""
    container = roles.role(roles.NODE).container_name
    plan = kube.cluster.spec.disruption
    if upgrading:
        plan = plan.model_copy(update={"max_wait": kube.cluster.spec.kubernetes.node_grace_seconds})

    def take(name: str, wait: int) -> tuple[int, str]:
        env = ["env", f"NODE_STATE_GRACE={wait}", f"NODE_STATE_REASON={REPLACE_REASON}"]
        proc = kube.k.exec(name, container, *env, NODE_STATE, "stopping", name)
        return proc.returncode, proc.stdout + proc.stderr

    def delete(names: list[str]) -> None:
        argv = kube.k.argv("delete", *(f"pod/{n}" for n in names), "--wait=true",
                           f"--timeout={int(timeout)}s")  # fmt: skip
        kube.k.check(argv, f"replacing {', '.join(names)}")

    step = max(map(len, sets.values()), default=1) if upgrading else None
    replace.roll(kube.controller_sh, sets, plan, take, delete, kept, timeout, kube.log, step)
