"""Applying the k8s target's manifests: the accounting database checked; nodes a smaller node
set leaves out drained; server-side apply of the Namespace, then the missing Secrets
(secrets.py; each made once, in a private temporary file removed right after, or from an
external database's password file), then the populate Jobs and what they mount, then (once
the Jobs' pods have a node) the workloads, leaving out (and naming) kinds the server does not
serve; ``kubectl wait`` for the populate Job; a rollout status per StatefulSet and Deployment
(a wait that fails names the pods not ready and why: stuck.py); running pods brought to the
applied config (config_sync.py) and ``scontrol reconfigure``; a wait, through
``kubectl exec`` in slurmctld, until every node is in service; the elastic nodes Slurm has
powered up whose Deployments are at zero (a restore's) scaled to one (power.py); and with
accounting, until slurmdbd knows the cluster (then the default account)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from slurmforge.deploy.backup import take
from slurmforge.deploy.backup.access import BackupAccess
from slurmforge.deploy.k8s import config_sync, controllers, node_watch, power, roll, stuck
from slurmforge.deploy.k8s.kubectl import Kubectl
from slurmforge.deploy.k8s.manifests import Manifests
from slurmforge.deploy.k8s.secrets import Secrets
from slurmforge.deploy.roles import CONTROLLER, DBD, NODE, POPULATE, TOPOLOGY_CONFIG
from slurmforge.deploy.slurm import ctl, database, upgrade
from slurmforge.errors import DeployError


class Host(BackupAccess, Protocol):
    """What applying asks of the k8s target (k8s/run.py's Kube)."""

    dir: Path
    k: Kubectl
    manifests: Manifests
    secrets: Secrets
    backup_first: bool  # back up before a series change (deploy without --no-backup)

    def controller_sh(self, command: str) -> tuple[int, str]: ...

    def pod(self, role: str) -> str: ...


# an object's apiVersion → the older one a server that lacks it takes the same object in
OLDER = {("policy/v1", "PodDisruptionBudget"): "policy/v1beta1"}


def unsupported(kube: Host) -> dict[str, str]:
    """File → why the server cannot take it (a kind its version does not serve, such as
    batch/v1 CronJob before Kubernetes 1.21). An object whose kind the server serves under the
    older version of OLDER is rewritten to it (a PodDisruptionBudget before 1.21)."""
    served: dict[str, set[str]] = {}

    def serves(version: str, kind: str) -> bool:
        if version not in served:
            served[version] = kube.k.served_kinds(version)
        return kind in served[version]

    out = {}
    for name, obj in kube.manifests.objects.items():
        version, kind = obj["apiVersion"], obj["kind"]
        older = OLDER.get((version, kind))
        if not serves(version, kind) and older and serves(older, kind):
            kube.manifests.rewrite(name, {**obj, "apiVersion": older})
        elif not serves(version, kind):
            out[name] = f"this server does not serve {version} {kind}"
    return out


def apply_files(
    kube: Host, names: list[str], earlier: list[str] | None = None, force: bool = False
) -> None:
    """Server-side apply of these files, in this order; on failure, every line kubectl
    wrote, and which objects were applied (``earlier`` files among them) and which were not.
    ``force``: their fields are the deploy's again where another writer changed them since."""
    argv = ["apply", "--server-side", "--field-manager=slurmforge"]
    if force:
        argv.append("--force-conflicts")
    for name in names:
        argv += ["-f", str(kube.dir / name)]
    proc = kube.k.run(kube.k.argv(*argv, namespaced=False))
    if proc.returncode == 0:
        return
    done = {ln.split()[0] for ln in proc.stdout.splitlines() if ln.strip()}
    applied, missing = [], []
    for name in [*(earlier or []), *names]:
        obj = kube.manifests.objects[name]
        ref = f"{obj['kind'].lower()}/{obj['metadata']['name']}"
        ok = name in (earlier or []) or any(d.endswith(ref) for d in done)
        (applied if ok else missing).append(ref)
    lines = (proc.stderr or "").strip().splitlines()
    raise DeployError(
        f"kubectl apply failed (exit {proc.returncode}):"
        + "".join(f"\n  {ln}" for ln in lines)
        + f"\n  applied: {', '.join(applied) or 'nothing'}"
        + f"\n  not applied: {', '.join(missing) or 'nothing'}"
    )


# the kinds whose pods wait for the jail a Job populates; applied after the Jobs have a node
WORKLOADS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "CronJob"})
SEAT_BOUND = 30  # seconds the workloads wait for that: a full cluster frees room by rolling
SEAT_POLL = 0.5


def seat_jobs(kube: Host, bound: float) -> None:
    """Wait, at most ``bound`` seconds, until each Job applied has its pod on a node or has
    completed. The pods that wait for the jail hold what they request while they wait; a
    populate Job scheduled after them on a cluster without room beside them would pend, and
    they would wait for it until the deploy timed out. Past the bound the workloads are applied
    anyway: a redeploy on a full cluster frees room only as its rollouts replace pods, and the
    Job's pod, queued first, takes it."""
    jobs = [obj["metadata"]["name"] for obj in kube.manifests.objects.values()
            if obj["kind"] == "Job"]  # fmt: skip
    deadline = time.monotonic() + bound
    while jobs and time.monotonic() < deadline:
        done = {j["metadata"]["name"] for j in kube.k.get("jobs") if j["status"].get("succeeded")}
        for pod in kube.k.get("pods", **{"app.kubernetes.io/component": POPULATE}):
            conditions = pod["status"].get("conditions", [])
            if any(c["type"] == "PodScheduled" and c["status"] == "True" for c in conditions):
                done.add(pod["metadata"]["labels"].get("job-name", ""))
        jobs = [j for j in jobs if j not in done]
        if jobs:
            time.sleep(SEAT_POLL)


def apply(kube: Host, timeout: float, removed: list[str] | None = None) -> str:
    """Check the accounting database; drain the nodes a smaller node set leaves out; apply
    (the Namespace, then the missing Secrets, then the populate Jobs and what they mount, then,
    once the Jobs have a node, the workloads: nothing waits for what it mounts, and no Job
    waits behind the pods that wait for it); wait for populate and the rollouts; hand running
    pods a changed node list; wait for every node, start the elastic nodes Slurm has powered up
    that do not run, then wait for slurmdbd to know the cluster. `sinfo -N -l`."""
    skipped = unsupported(kube)  # the first call: names a server that does not answer
    controllers.check_storage(kube.cluster, kube.k)
    controllers.check_change(kube.cluster, kube.k)
    names = [n for n in kube.manifests.objects if n not in skipped]
    upgrading = check_upgrade(kube)
    kube.secrets.check_database()  # before anything changes (a drain included)
    before = config_sync.live_config(kube)  # the config the running daemons were given
    removed = removed_nodes(kube) if removed is None else removed
    seen = ctl.nodes(kube.controller_sh)  # None before the first deploy
    kept = ctl.drains(seen)  # an operator's drains outlive the apply
    known = [n for n in removed if seen and n in seen]
    if known:
        ctl.drain(kube.controller_sh, known, timeout)
    gone = power.keep_running(kube)
    node_watch.keep_topology(kube)
    first = [n for n in names if kube.manifests.objects[n]["kind"] == "Namespace"]
    apply_files(kube, first)
    rotated = kube.secrets.ensure()
    # the topology node-watch writes (it patches the file; keep_topology kept it, or this
    # deploy's node count replaces it): the deploy's, whoever wrote it last
    topology = [n for n in names if n == f"configmap-{TOPOLOGY_CONFIG}.yaml"]
    if topology:
        apply_files(kube, topology, first, force=True)
    rest = [n for n in names if n not in first + topology]
    workloads = [n for n in rest if kube.manifests.objects[n]["kind"] in WORKLOADS]
    jobs = [n for n in rest if n not in workloads]  # the Jobs and what they mount
    apply_files(kube, jobs, first)
    seat_jobs(kube, min(timeout, SEAT_BOUND))
    apply_files(kube, workloads, first + jobs)
    if rotated and kube.k.running_pods(DBD):  # its config takes the password at start
        kube.k.check(
            kube.k.argv("rollout", "restart", f"deployment/{DBD}"),
            "restarting slurmdbd for the new database password",
        )
    for name, why in skipped.items():
        print(f"not applied: {kube.dir / name} ({why})", file=kube.log)
    wait = f"--timeout={int(timeout)}s"
    stuck.wait(
        kube.k,
        kube.k.argv("wait", "--for=condition=complete", f"job/{kube.manifests.populate_job}", wait),
        f"waiting for job/{kube.manifests.populate_job}",
    )
    for kind, name in rollouts(kube):
        stuck.wait(
            kube.k,
            kube.k.argv("rollout", "status", f"{kind}/{name}", wait),
            f"rollout of {kind}/{name}",
        )
    roll.wait_sets(kube, timeout)
    # a removed node's pod is gone before this returns (the StatefulSet only starts deleting
    # it): its preStop has run and nothing of it is left to reach the jobs or the API
    for node in removed:
        kube.k.check(
            kube.k.argv("wait", "--for=delete", f"pod/{node}", wait),
            f"waiting for pod/{node} to go",
        )
    power.remove(kube, gone, timeout)
    # the node pods a changed template left on an older one: replaced after their jobs
    # (roll.py), once slurmctld and the other pods run the new config
    replacing = roll.changed(kube, timeout)
    leaving = [pod for pods in replacing.values() for pod in pods]
    synced = config_sync.sync_config(kube, timeout, leaving)
    changed = before is not None and before != config_sync.expected_config(kube.manifests.objects)
    if synced or changed:  # slurmctld and every slurmd re-read theirs
        ctl.reconfigure(kube.controller_sh)
    roll.roll(kube, replacing, kept, timeout, upgrading)
    nodes = [node for _, node in kube.cluster.fixed_nodes]  # an elastic set's: Slurm's to start
    seen = ctl.require_ready(kube.controller_sh, nodes, kept, timeout)
    for line in ctl.kept_drained(seen, nodes, kept):
        print(f"note: {line}", file=kube.log)
    power.start_powered_up(kube, kept, timeout)
    if kube.cluster.spec.accounting.enabled:
        for line in database.setup(kube.cluster, kube.controller_sh, timeout):
            print(f"note: {line}", file=kube.log)
    return kube.k.check(
        kube.k.argv("exec", kube.pod(CONTROLLER), "-c", CONTROLLER, "--", "sinfo", "-N", "-l"),
        "sinfo in slurmctld",
    )


def rollouts(kube: Host) -> list[tuple[str, str]]:
    """(kind, name) of what runs pods, in the order their rollouts are waited for."""
    # a node set scaled to zero, or an elastic node Slurm has not started, has none to wait for
    # nor the node sets, whose pods a deploy replaces itself (OnDelete: roll.py)
    return [
        (o["kind"].lower(), o["metadata"]["name"])
        for o in kube.manifests.objects.values()
        if o["kind"] in ("StatefulSet", "Deployment")
        and o["spec"].get("replicas", 1)
        and o["spec"].get("updateStrategy", {}).get("type") != "OnDelete"
    ]


def check_upgrade(kube: Host) -> bool:
    """Refuse a Slurm release the running slurmctld cannot move to (upgrade.check); True for an
    upgrade to another series. The rollouts then replace the daemons together, and roll.py
    every node pod of a set at once: Slurm's own order (slurmdbd first) is kept by the local
    target only."""
    code, out = kube.controller_sh("scontrol version")
    running = out.split()[-1] if code == 0 and out.startswith("slurm ") else None
    upgrading = bool(running) and upgrade.check_cluster(kube.cluster, running or "")
    if upgrading and kube.backup_first:
        take.before_upgrade(kube)
    return upgrading


def removed_nodes(kube: Host) -> list[str]:
    """Nodes the server runs that the cluster, as rendered now, leaves out (highest
    ordinals: a StatefulSet scales down from the top)."""
    counts = {ns.name: len(ns.fixed_nodes) for ns in kube.cluster.spec.nodesets}
    removed = []
    for item in kube.k.get("statefulsets", **{"app.kubernetes.io/component": NODE}):
        name, now = item["metadata"]["name"], item["spec"].get("replicas", 1)
        if name in counts:
            removed += [f"{name}-{i}" for i in range(counts[name], now)]
    return removed
