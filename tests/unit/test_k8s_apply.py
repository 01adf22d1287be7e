"""What `invoke deploy --target k8s` runs against a server: exactly these kubectl commands, and
what it says when the server lacks a kind, cannot be reached, refuses an apply or a wait fails."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from slurmforge.deploy.k8s import apply as k8s_apply
from slurmforge.deploy.k8s.kubectl import kubectl_path
from slurmforge.deploy.slurm import ctl
from slurmforge.errors import ConfigError, DeployError
from tests.common import load_yaml
from tests.unit.kube import rendered_kube

NODES = ("cpu-0", "cpu-1", "a100-0", "a100-1", "a100-2")  # the cluster of cluster_data


def _server(served: dict[str, list[str]], failing: str = ""):
    """A recording stand-in for kubectl's answers: the kinds served per API version; ``failing``:
    an apply that names this file fails after applying the files before it. No StatefulSets or
    pods exist yet, a Job applied has completed, and slurmctld reports every node idle."""
    calls: list[list[str]] = []
    jobs: list[dict] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "get" in argv and "jobs" in argv:
            return subprocess.CompletedProcess(argv, 0, json.dumps({"items": jobs}), "")
        if argv[-1] == "json":  # get statefulsets / pods
            return subprocess.CompletedProcess(argv, 0, json.dumps({"items": []}), "")
        if ctl.NODES in argv:
            out = "".join(f"{n}|idle|none\n" for n in NODES)
            return subprocess.CompletedProcess(argv, 0, out, "")
        if len(argv) > 2 and argv[-2] == "-c" and "sacctmgr -n -P show" in argv[-1]:
            # slurmdbd knows the cluster and the default account
            return subprocess.CompletedProcess(argv, 0, argv[-1].split()[5] + "\n", "")
        if "--raw" in argv:
            version = argv[-1].split("/", 2)[-1]
            kinds = served.get(version, [])
            out = json.dumps({"resources": [{"kind": k} for k in kinds]})
            return subprocess.CompletedProcess(argv, 0, out, "")
        if "apply" in argv and failing and any(a.endswith(failing) for a in argv):
            files = [a for a in argv if a.endswith(".yaml")]
            done = files[: [f.endswith(failing) for f in files].index(True)]
            objs = [load_yaml(Path(f).read_text()) for f in done]
            out = "".join(
                f"{o['kind'].lower()}/{o['metadata']['name']} serverside-applied\n" for o in objs
            )
            err = "Error from server (Invalid): first\nError from server (Forbidden): second\n"
            return subprocess.CompletedProcess(argv, 1, out, err)
        if "apply" in argv:
            applied = (load_yaml(Path(a).read_text()) for a in argv if a.endswith(".yaml"))
            jobs.extend({**o, "status": {"succeeded": 1}} for o in applied if o["kind"] == "Job")
        out = "NODELIST   NODES PARTITION STATE\ncpu-0 1 main* idle\n" if "sinfo" in argv else ""
        return subprocess.CompletedProcess(argv, 0, out, "")  # the munge Secret exists already

    return calls, run


SERVED_121 = {
    "v1": ["Namespace", "ConfigMap", "PersistentVolumeClaim", "Service"],
    "apps/v1": ["StatefulSet", "Deployment"],
    "batch/v1": ["Job", "CronJob"],
    "networking.k8s.io/v1": ["NetworkPolicy"],
    "policy/v1": ["PodDisruptionBudget"],
}
# a 1.20 server: CronJob and PodDisruptionBudget only in their beta versions
SERVED_120 = {
    **SERVED_121,
    "batch/v1": ["Job"],
    "policy/v1": [],
    "policy/v1beta1": ["PodDisruptionBudget"],
}


def test_apply_runs_exactly_these_kubectl_commands(checkout) -> None:
    cluster_file, root = checkout
    calls, run = _server(SERVED_121)
    kube = rendered_kube(cluster_file, root, run, namespace="team-a", context="prod")
    out = k8s_apply.apply(kube, 300)
    kubectl = kubectl_path()
    ctx, ns = ["--context", "prod"], ["--context", "prod", "--namespace", "team-a"]
    # the ServiceMonitor and PrometheusRule: this server serves no monitoring.coreos.com/v1
    objects = kube.manifests.objects.items()
    files = [str(kube.dir / n) for n, o in objects if "coreos" not in o["apiVersion"]]
    kinds = ("StatefulSet", "Deployment", "CronJob")
    workloads = [str(kube.dir / n) for n, o in objects if o["kind"] in kinds]
    apply = [kubectl, *ctx, "apply", "--server-side", "--field-manager=slurmforge"]
    instance, nodes = "app.kubernetes.io/instance=train", "app.kubernetes.io/component=node"
    database = "app.kubernetes.io/component=mariadb"
    populate = "app.kubernetes.io/component=jail-populate"
    exec_ = [kubectl, *ns, "exec", "slurmctld-0", "-c", "slurmctld", "--"]
    sinfo = ctl.NODES
    controller = "app.kubernetes.io/component=slurmctld"
    token = "jsonpath={.data.metrics-token}"
    assert (
        calls
        == [
            *(
                [kubectl, *ctx, "get", "--raw", path]
                for path in (
                    "/api/v1",
                    "/apis/networking.k8s.io/v1",  # the policies come before any pod
                    "/apis/batch/v1",
                    "/apis/apps/v1",
                    "/apis/policy/v1",
                    "/apis/monitoring.coreos.com/v1",
                )
            ),
            # how many controllers run now (none yet), which a redeploy may not change
            [kubectl, *ns, "get", "statefulsets", "-l", f"{instance},{controller}", "-o", "json"],
            # the Slurm a running controller has, for upgrade.check (this one answers nothing)
            [*exec_, "bash", "-c", "scontrol version"],
            # the cluster's own database: its password Secret exists, mariadb-0 does not run
            [kubectl, *ns, "get", "secret", "db-password", "-o", "jsonpath={.data.db-password}"],
            [kubectl, *ns, "get", "pods", "-l", f"{instance},{database}", "-o", "json"],
            # the Slurm config the running daemons were given (none yet here)
            [kubectl, *ns, "get", "configmaps", "-l", instance, "-o", "json"],
            [kubectl, *ns, "get", "statefulsets", "-l", f"{instance},{nodes}", "-o", "json"],
            [*exec_, "bash", "-c", sinfo],  # the drains from before, which outlive the apply
            # elastic nodes' Deployments the server runs (none): kept at their scale, or removed
            [kubectl, *ns, "get", "deployments", "-l", f"{instance},{nodes}", "-o", "json"],
            [*apply, "-f", files[0]],  # the Namespace first
            # the Secrets exist already
            [kubectl, *ns, "get", "secret", "munge-key", "-o", "jsonpath={.data.munge\\.key}"],
            [kubectl, *ns, "get", "secret", "jwt-key", "-o", "jsonpath={.data.jwt_hs256\\.key}"],
            [kubectl, *ns, "get", "secret", "db-password", "-o", "jsonpath={.data.db-password}"],
            [kubectl, *ns, "get", "secret", "metrics-token", "-o", token],
            # what the populate Job mounts and the Job; once it has a node, the workloads
            [*apply, *(a for f in files[1:] if f not in workloads for a in ("-f", f))],
            [kubectl, *ns, "get", "jobs", "-l", instance, "-o", "json"],
            [kubectl, *ns, "get", "pods", "-l", f"{instance},{populate}", "-o", "json"],
            [*apply, *(a for f in workloads for a in ("-f", f))],
            [
                kubectl,
                *ns,
                "wait",
                "--for=condition=complete",
                f"job/{kube.manifests.populate_job}",
                "--timeout=300s",
            ],
            *(
                [kubectl, *ns, "rollout", "status", s, "--timeout=300s"]
                for s in (
                    *(f"statefulset/{s}" for s in ("slurmctld", "login", "mariadb")),
                    "deployment/slurmdbd",
                    "deployment/slurmrestd",
                    "deployment/exporter",
                )
            ),
            # the node sets (OnDelete, which `rollout status` does not serve): pods ready
            [kubectl, *ns, "get", "statefulsets", "-l", f"{instance},{nodes}", "-o", "json"],
            # node pods on an older template, to replace after their jobs (none: a first deploy)
            [kubectl, *ns, "get", "statefulsets", "-l", f"{instance},{nodes}", "-o", "json"],
            [kubectl, *ns, "get", "pods", "-l", f"{instance},{nodes}", "-o", "json"],
            [kubectl, *ns, "get", "pods", "-l", instance, "-o", "json"],  # their Slurm config
            [*exec_, "bash", "-c", sinfo],  # until every node is in service
            # slurmdbd has the cluster; the default account exists
            [*exec_, "bash", "-c", "sacctmgr -n -P show cluster train format=cluster"],
            [*exec_, "bash", "-c", "sacctmgr -n -P show account default format=account"],
            # the exporter is an operator (it sees every job under PrivateData): made one
            [
                *exec_,
                "bash",
                "-c",
                "sacctmgr -n -P show user slurm-exporter format=user,adminlevel",
            ],
            [
                *(*exec_, "bash", "-c"),
                "sacctmgr -i add user slurm-exporter Account=default AdminLevel=Operator",
            ],
            [
                kubectl,
                *ns,
                "exec",
                "slurmctld-0",
                "-c",
                "slurmctld",
                "--",
                "sinfo",
                "-N",
                "-l",
            ],
        ]
    )
    assert files[0].endswith("namespace.yaml")
    assert "cpu-0 1 main* idle" in out
    kustomization = load_yaml((kube.dir / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "team-a"


@pytest.mark.parametrize("older", [True, False])
def test_the_daemons_reread_a_changed_config_even_where_every_pod_already_sees_it(
    checkout, older: bool
) -> None:
    """A scale's ConfigMap may reach every running pod's files (its kubelet's own re-sync)
    before deploy looks at them: what the server held before the apply says whether the
    daemons run an older config, and then they are told to re-read it."""
    cluster_file, root = checkout
    calls, fake = _server(SERVED_121)
    kube = rendered_kube(cluster_file, root, fake, namespace="team-a", context="prod")
    live = [dict(o) for o in kube.manifests.objects.values() if o["kind"] == "ConfigMap"]
    if older:  # the node list before a scale
        slurm = next(o for o in live if o["metadata"]["name"] == "slurm-config")
        slurm["data"] = {**slurm["data"], "slurm.conf": "NodeName=cpu-[0-2]\n"}

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        if "configmaps" in argv:
            calls.append(argv)
            return subprocess.CompletedProcess(argv, 0, json.dumps({"items": live}), "")
        return fake(argv)  # no pod runs: none sees an older file

    kube.k.run = run
    k8s_apply.apply(kube, 300)
    reconfigured = [c for c in calls if c[-1] == "scontrol reconfigure"]
    assert len(reconfigured) == (1 if older else 0)


def test_a_kind_the_server_lacks_is_named_not_applied(checkout, capsys) -> None:
    cluster_file, root = checkout
    calls, run = _server(SERVED_120)
    kube = rendered_kube(cluster_file, root, run)
    k8s_apply.apply(kube, 300)
    applied = [a for c in calls if "apply" in c for a in c if a.endswith(".yaml")]
    assert not [a for a in applied if "cronjob" in a]
    # a budget it takes in the older version: the same object, as policy/v1beta1
    budgets = [a for a in applied if "poddisruptionbudget" in a]
    assert budgets and all(
        load_yaml(Path(a).read_text())["apiVersion"] == "policy/v1beta1" for a in budgets
    )
    # and the ServiceMonitor and PrometheusRule
    assert len(applied) == len(kube.manifests.objects) - 3
    err = capsys.readouterr().err
    assert "cronjob-gpu-health-check.yaml (this server does not serve batch/v1 CronJob)" in err
    lacks = "(this server does not serve monitoring.coreos.com/v1 ServiceMonitor)"
    assert f"servicemonitor-exporter.yaml {lacks}" in err


def test_an_unreachable_server_is_named_before_anything_is_applied(checkout) -> None:
    cluster_file, root = checkout
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        refused = "The connection to the server 127.0.0.1:6443 was refused"
        return subprocess.CompletedProcess(argv, 1, "", refused)

    kube = rendered_kube(cluster_file, root, run)
    with pytest.raises(DeployError, match=r"serves in v1 failed \(exit 1\):\n  The connection"):
        k8s_apply.apply(kube, 300)
    assert not [c for c in calls if "apply" in c]


def test_a_failed_apply_says_every_error_and_what_was_applied(checkout) -> None:
    cluster_file, root = checkout
    _, run = _server(SERVED_121, failing="statefulset-slurmctld.yaml")
    kube = rendered_kube(cluster_file, root, run)
    with pytest.raises(DeployError) as exc:
        k8s_apply.apply(kube, 300)
    message = exc.value.message
    assert "Error from server (Invalid): first" in message
    assert "Error from server (Forbidden): second" in message
    applied, missing = message.split("\n  applied: ")[1].split("\n  not applied: ")
    assert "configmap/slurm-config" in applied and "statefulset/slurmctld" in missing
    assert "statefulset/login" in missing


def test_a_failing_wait_names_the_job(checkout) -> None:
    cluster_file, root = checkout
    _, served = _server(SERVED_121)

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        if "wait" in argv:
            return subprocess.CompletedProcess(argv, 1, "", "error: timed out")
        return served(argv)

    kube = rendered_kube(cluster_file, root, run)
    with pytest.raises(
        Exception, match=r"waiting for job/jail-populate-.* failed \(exit 1\):\n  error: timed out"
    ):
        k8s_apply.apply(kube, 5)


# pods as `kubectl get pods -o json` lists them while a deploy waits on them (trimmed)
STUCK_PODS = [
    {"metadata": {"name": "jail-populate-2d2e6bc92b8b-x7k2p",
                  "ownerReferences": [{"kind": "Job", "name": "jail-populate-2d2e6bc92b8b"}]},
     "status": {"phase": "Pending", "conditions": [
         {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
          "message": "0/1 nodes are available: 1 node(s) were unschedulable."}]}},
    {"metadata": {"name": "login-0"},
     "status": {"phase": "Pending",
                "initContainerStatuses": [{"name": "wait-jail", "ready": False,
                                           "state": {"running": {}}}],
                "containerStatuses": [{"name": "login", "ready": False, "state": {
                    "waiting": {"reason": "PodInitializing"}}}]}},
    {"metadata": {"name": "slurmctld-0"},
     "status": {"phase": "Running", "containerStatuses": [
         {"name": "slurmctld", "ready": False, "restartCount": 3,
          "state": {"waiting": {"reason": "CrashLoopBackOff",
                                "message": "back-off 40s restarting failed container"}},
          "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}},
    {"metadata": {"name": "cpu-0"},
     "status": {"phase": "Running", "containerStatuses": [
         {"name": "slurmd", "ready": True, "state": {"running": {}}}]}},
    {"metadata": {"name": "slurmdbd-5d9c-abcde", "deletionTimestamp": "2026-11-27T16:00:00Z"},
     "status": {"phase": "Running"}},
]  # fmt: skip


def test_a_failing_wait_names_each_pod_not_ready_and_why(checkout) -> None:
    cluster_file, root = checkout
    _, served = _server(SERVED_121)
    logs = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        if "wait" in argv:
            return subprocess.CompletedProcess(argv, 1, "", "error: timed out")
        if argv[-1] == "json" and "pods" in argv:
            return subprocess.CompletedProcess(argv, 0, json.dumps({"items": STUCK_PODS}), "")
        if "logs" in argv:
            logs.append(argv[argv.index("logs") :])
            out = "".join(f"line {i}\n" for i in range(9)) + "fatal: no StateSaveLocation\n"
            return subprocess.CompletedProcess(argv, 0, out, "")
        return served(argv)

    kube = rendered_kube(cluster_file, root, run)
    with pytest.raises(DeployError) as exc:
        k8s_apply.apply(kube, 5)
    (_, reasons) = exc.value.message.split("\n  pods not ready:\n")
    assert reasons.splitlines() == [
        "  jail-populate-2d2e6bc92b8b-x7k2p: not scheduled: 0/1 nodes are available: "
        "1 node(s) were unschedulable.",
        "  login-0: init container wait-jail: still running",
        "  slurmctld-0: container slurmctld: CrashLoopBackOff (last exit 1): "
        "back-off 40s restarting failed container",
        "    | line 5",
        "    | line 6",
        "    | line 7",
        "    | line 8",
        "    | fatal: no StateSaveLocation",
        "  slurmdbd-5d9c-abcde: terminating",
    ]
    # the crashed run's log, not the waiting container's (which has none yet)
    assert logs == [["logs", "slurmctld-0", "-c", "slurmctld", "--tail=5", "--previous"]]


def test_status_and_login_on_k8s_run_these_kubectl_commands(checkout) -> None:
    cluster_file, root = checkout
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        out = "slurmctld-0   1/1   Running\n" if "pods" in argv else "cpu-0 1 main* idle\n"
        return subprocess.CompletedProcess(argv, 0, out, "")

    kube = rendered_kube(cluster_file, root, run, namespace="team-a", context="prod")
    calls.clear()
    status = kube.status()
    kubectl = kubectl_path()
    ns = ["--context", "prod", "--namespace", "team-a"]
    assert calls == [
        [kubectl, *ns, "get", "pods", "-l", "app.kubernetes.io/instance=train"],
        [kubectl, *ns, "exec", "slurmctld-0", "-c", "slurmctld", "--", "bash", "-c",
         "sinfo -N -l; echo; squeue"],
    ]  # fmt: skip
    assert status == "slurmctld-0   1/1   Running\n\ncpu-0 1 main* idle"
    tty = kube.login_argv("alice")[len(ns) + 2]
    assert tty in ("-i", "-it")
    assert kube.login_argv("alice") == [
        kubectl, *ns, "exec", tty, "login-0", "-c", "login", "--",
        "chroot", "/jail", "su", "--login", "--", "alice",
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="--user 'x y'"):
        kube.login_argv("x y")
