"""kubernetes.node_watch: what the k8s target renders for it, what it may do through the API, the
input refused, and how the watcher reads a Kubernetes node's notices
(tests/k8s/test_k8s_cluster.py taints the lab's node under a job)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurmforge.deploy import loader, roles
from slurmforge.deploy.k8s import access, node_watch
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.versions import load as load_versions
from tests.common import ROOT, dump_yaml, load_yaml
from tests.unit.helpers import assert_dry_run_refused, shipped_with
from tests.unit.kube import cluster_data, containers_of, pod_of, rendered_kube


def _watching(checkout, **watch) -> dict[tuple[str, str], dict]:
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())
    data["kubernetes"]["node_watch"] = {"enabled": True, **watch}
    cluster_file.write_text(dump_yaml(data, sort_keys=False))
    kube = rendered_kube(cluster_file, root)
    kube.manifests.validate()  # against the API's own schemas
    return {(o["kind"], o["metadata"]["name"]): o for o in kube.manifests.objects.values()}


def test_off_by_default_nothing_may_read_the_nodes(checkout) -> None:
    objects = rendered_kube(*checkout).manifests.objects.values()
    assert not [o for o in objects if o["kind"].startswith("Cluster")]
    assert not [o for o in objects if o["metadata"]["name"] == "node-watch"]


def test_only_node_watch_holds_a_token_and_it_may_only_read_nodes_and_pods(checkout) -> None:
    objects = _watching(checkout)
    wide = objects[("ClusterRole", "hpc-node-watch")]  # cluster-wide: named for its namespace
    assert "namespace" not in wide["metadata"]
    assert wide["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    binding = objects[("ClusterRoleBinding", "hpc-node-watch")]
    assert binding["roleRef"]["name"] == "hpc-node-watch"
    subject = {"kind": "ServiceAccount", "name": "node-watch", "namespace": "hpc"}
    assert binding["subjects"] == [subject]
    assert objects[("Role", "node-watch")]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
    ]
    assert objects[("RoleBinding", "node-watch")]["subjects"] == [subject]
    pod = pod_of(objects[("Deployment", "node-watch")])
    assert pod["serviceAccountName"] == "node-watch" and not pod["automountServiceAccountToken"]
    (watcher,) = pod["containers"]
    assert watcher["args"][-2:] == ["--user", "slurm"]  # SlurmUser once munged runs
    caps = watcher["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"]}
    paths = [m["mountPath"] for m in watcher["volumeMounts"]]
    assert access.TOKEN_DIR in paths and "/jail" not in paths
    # no other pod runs as an account that reads nodes, and no other container mounts its token
    for key, obj in objects.items():
        other = pod_of(obj)
        if other is None or key == ("Deployment", "node-watch"):
            continue
        assert "serviceAccountName" not in other, key
        for container in containers_of(obj):
            mounts = container.get("volumeMounts", [])
            assert access.TOKEN_DIR not in [m["mountPath"] for m in mounts], key


def test_the_watcher_is_told_the_notices_and_the_cluster_s_node_pods(checkout) -> None:
    objects = _watching(
        checkout, interval="2s", unhealthy={"labels": ["example.com/bad-disk=true"]}
    )
    (watcher,) = pod_of(objects[("Deployment", "node-watch")])["containers"]
    env = {e["name"]: e.get("value") for e in watcher["env"]}
    config = json.loads(env["NODE_WATCH_CONFIG"])
    assert config["interval"] == 2
    assert config["pods"] == (
        "app.kubernetes.io/name=slurm,app.kubernetes.io/instance=train,"
        "app.kubernetes.io/component=node"
    )
    assert "cloud.google.com/impending-node-termination" in config["preemption"]["taints"]
    bad_disk = {"taints": [], "labels": ["example.com/bad-disk=true"], "conditions": []}
    assert config["unhealthy"] == bad_disk
    assert env["MUNGE_KEY_FILE"].endswith("/munge.key")


@pytest.mark.parametrize(
    ("watch", "said"),
    [
        (
            {"preemption": {"taints": ["bad key"]}},
            r"preemption\.taints\[0\]: .*expected a Kubernetes",
        ),
        ({"preemption": {"labels": ["a/b/c"]}}, r"preemption\.labels\[0\]"),
        ({"preemption": {"labels": ["-x"]}}, r"preemption\.labels\[0\]"),
        ({"unhealthy": {"labels": ["pool=has space"]}}, r"unhealthy\.labels\[0\]"),
        ({"unhealthy": {"conditions": ["Kernel Deadlock"]}}, r"expected a Node condition type"),
        ({"interval": "soon"}, r"node_watch\.interval: .*expected a duration"),
        ({"interval": 0}, r"node_watch\.interval"),
        ({"taints": ["x"]}, r"node_watch\.taints"),
    ],
)
def test_bad_watch_input_fails_deploy_in_one_line_and_writes_nothing(
    write_cluster, tmp_path: Path, watch, said
) -> None:
    data = cluster_data(node_watch={"enabled": True, **watch})
    path = write_cluster(data)
    stderr = assert_dry_run_refused(path, tmp_path / "out", f"{path}: kubernetes.node_watch.")
    assert re.search(said, stderr), stderr


@pytest.fixture(scope="module")
def watcher():
    sys.path.insert(0, str(ROOT / "images" / "exporter"))
    try:
        yield importlib.import_module("node_watch")
    finally:
        sys.path.remove(str(ROOT / "images" / "exporter"))


def test_a_notice_is_a_taint_a_label_or_a_true_condition(watcher) -> None:
    taints = ["cloud.google.com/impending-node-termination", "karpenter.sh/disruption=disrupting"]
    spec = {"taints": taints, "labels": ["pool=spot"], "conditions": ["KernelDeadlock"]}
    node = {"metadata": {"name": "k1", "labels": {"pool": "ondemand"}}, "spec": {}, "status": {}}
    assert watcher.notice(node, spec) is None
    node["spec"]["taints"] = [
        {"key": "karpenter.sh/disruption", "value": "other", "effect": "NoSchedule"}
    ]
    node["status"]["conditions"] = [{"type": "KernelDeadlock", "status": "False"}]
    assert watcher.notice(node, spec) is None  # another value; a condition that is not True
    node["spec"]["taints"].append(
        {"key": "cloud.google.com/impending-node-termination", "effect": "NoExecute"}
    )
    node["metadata"]["labels"]["pool"] = "spot"
    node["status"]["conditions"][0]["status"] = "True"
    assert watcher.notice(node, spec) == (
        "taint cloud.google.com/impending-node-termination, label pool=spot, "
        "condition KernelDeadlock"
    )


def _labelled(checkout, topology: dict) -> dict[tuple[str, str], dict]:
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())
    data["topology"] = {"labels": topology}
    cluster_file.write_text(dump_yaml(data, sort_keys=False))
    kube = rendered_kube(cluster_file, root)
    kube.manifests.validate()
    return {(o["kind"], o["metadata"]["name"]): o for o in kube.manifests.objects.values()}


def test_a_topology_from_labels_starts_unplaced_in_a_configmap_of_its_own(checkout) -> None:
    objects = _labelled(checkout, {"tree": ["topology.kubernetes.io/zone", "example.com/rack"]})
    conf = objects[("ConfigMap", "slurm-config")]["data"]
    assert "TopologyPlugin=topology/tree" in conf["slurm.conf"].splitlines()
    assert "topology.conf" not in conf  # node-watch's to write, in its own ConfigMap
    topology = objects[("ConfigMap", "slurm-topology")]["data"]["topology.conf"]
    assert topology.splitlines()[1:] == ["SwitchName=unplaced Nodes=cpu-[0-1],a100-[0-2]"]
    # every pod that reads /etc/slurm sees both, and sees either change
    for key in (("StatefulSet", "slurmctld"), ("StatefulSet", "cpu"), ("Deployment", "node-watch")):
        volumes = {v["name"]: v for v in pod_of(objects[key])["volumes"]}
        sources = volumes["slurm-config"]["projected"]["sources"]
        assert sources == [{"configMap": {"name": "slurm-config"}},
                           {"configMap": {"name": "slurm-topology"}}], key  # fmt: skip
    # node-watch runs for the labels alone, with no notice to act on, and may write that one
    (watcher,) = pod_of(objects[("Deployment", "node-watch")])["containers"]
    config = json.loads(
        next(e["value"] for e in watcher["env"] if e["name"] == "NODE_WATCH_CONFIG")
    )
    assert config["preemption"] == {"taints": [], "labels": [], "conditions": []}
    assert config["topology"]["keys"] == ["topology.kubernetes.io/zone", "example.com/rack"]
    assert objects[("Role", "node-watch")]["rules"][1] == {
        "apiGroups": [""], "resources": ["configmaps"],
        "resourceNames": ["slurm-topology"], "verbs": ["get", "patch"],
    }  # fmt: skip


def test_a_block_topology_from_labels_is_block_plugin(checkout) -> None:
    objects = _labelled(checkout, {"block": "nvidia.com/gpu.clique", "unplaced": "spare"})
    conf = objects[("ConfigMap", "slurm-config")]["data"]["slurm.conf"]
    assert "TopologyPlugin=topology/block" in conf.splitlines()
    topology = objects[("ConfigMap", "slurm-topology")]["data"]["topology.conf"]
    assert topology.splitlines()[1:] == ["BlockName=spare Nodes=cpu-[0-1],a100-[0-2]"]


@pytest.mark.parametrize(
    ("topology", "said"),
    [
        ({"labels": {}}, r"topology\.labels: .*exactly one of tree and block"),
        ({"labels": {"tree": ["a"], "block": "b"}}, r"exactly one of tree and block"),
        ({"labels": {"tree": ["rack id"]}}, r"labels\.tree\[0\]: expected a Kubernetes label key"),
        ({"labels": {"block": "a=b"}}, r"labels\.block: expected a Kubernetes label key"),
        ({"labels": {"tree": ["a"]}, "block_sizes": [4]}, r"block_sizes: expected block"),
        ({"labels": {"tree": ["a"]}, "tree": [{"name": "s"}]}, r"one of tree, block and labels"),
    ],
)  # fmt: skip
def test_bad_label_topology_fails_deploy_in_one_line_and_writes_nothing(
    write_cluster, tmp_path: Path, topology, said
) -> None:
    path = write_cluster(cluster_data() | {"topology": topology})
    stderr = assert_dry_run_refused(path, tmp_path / "out", f"{path}: topology")
    assert re.search(said, stderr), stderr


def test_the_labels_place_each_node_under_its_switches_or_unplaced(watcher) -> None:
    spec = {"kind": "tree", "keys": ["zone", "rack"], "unplaced": "unplaced",
            "block_sizes": [], "header": "# test"}  # fmt: skip
    nodes = ["cpu-0", "cpu-1", "cpu-2", "cpu-3", "cpu-4"]
    placed = {"cpu-0": "k1", "cpu-1": "k2", "cpu-2": "k3", "cpu-3": "k4"}  # cpu-4: no pod
    labels = {
        "k1": {"zone": "a", "rack": "r1"},
        "k2": {"zone": "b", "rack": "r1"},  # the same rack name in another zone
        "k3": {"zone": "a", "rack": "r1"},
        "k4": {"zone": "a"},  # no rack label
    }
    assert watcher.topology_conf(spec, nodes, placed, labels).splitlines() == [
        "# test",
        "SwitchName=a.r1 Nodes=cpu-0,cpu-2",
        "SwitchName=b.r1 Nodes=cpu-1",
        "SwitchName=unplaced Nodes=cpu-3,cpu-4",
        "SwitchName=a Switches=a.r1",
        "SwitchName=b Switches=b.r1",
        "SwitchName=root Switches=a,b,unplaced",
    ]
    block = {**spec, "kind": "block", "keys": ["clique"], "block_sizes": [2]}
    labels = {"k1": {"clique": "c0"}, "k2": {"clique": "c0"}, "k3": {"clique": "c1"}}
    assert watcher.topology_conf(block, nodes, placed, labels).splitlines() == [
        "# test",
        "BlockName=c0 Nodes=cpu-0,cpu-1",
        "BlockName=c1 Nodes=cpu-2",
        "BlockName=unplaced Nodes=cpu-3,cpu-4",
        "BlockSizes=2",
    ]


def test_a_local_cluster_with_label_topology_has_every_node_unplaced(write_cluster) -> None:
    """The local target has no Kubernetes nodes, so no labels: a valid tree all the same."""
    path = write_cluster(shipped_with(topology={"labels": {"tree": ["example.com/rack"]}}))
    cluster = loader.load(path, load_versions(ROOT / "versions.yaml"))
    files = slurmconf.render(cluster)
    assert "TopologyPlugin=topology/tree" in files["slurm.conf"].splitlines()
    assert files["topology.conf"].splitlines()[1:] == ["SwitchName=unplaced Nodes=cpu-[0-1]"]
    assert "node-watch" not in {r.name for r in roles.running(cluster.spec, "local")}


@pytest.mark.parametrize(
    ("placed", "kept"),
    [
        ("# w\nSwitchName=r1 Nodes=cpu-0,cpu-1,a100-0,a100-1,a100-2\n", True),
        ("# w\nSwitchName=r1 Nodes=cpu-0,a100-0,a100-1,a100-2\n", False),  # scaled since
        ("# w\nBlockName=b1 Nodes=cpu-0,cpu-1,a100-0,a100-1,a100-2\n", False),  # another kind
    ],
)
def test_a_deploy_keeps_the_placed_topology_while_it_places_every_node(
    checkout, placed: str, kept: bool
) -> None:
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())
    data["topology"] = {"labels": {"tree": ["example.com/rack"]}}
    cluster_file.write_text(dump_yaml(data, sort_keys=False))

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        live = {"metadata": {"name": "slurm-topology"}, "data": {"topology.conf": placed}}
        return subprocess.CompletedProcess(argv, 0, json.dumps({"items": [live]}), "")

    kube = rendered_kube(cluster_file, root, run)
    ours = kube.manifests.objects["configmap-slurm-topology.yaml"]["data"]["topology.conf"]
    node_watch.keep_topology(kube)
    now = kube.manifests.objects["configmap-slurm-topology.yaml"]["data"]["topology.conf"]
    assert now == (placed if kept else ours)
