"""Elastic node sets on the k8s target, as rendered and applied: one Deployment per node Slurm
starts and stops, started by node-power beside slurmctld with the one token of the cluster,
whose Role can scale those Deployments and nothing else."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from slurmforge.deploy.k8s import access, power
from slurmforge.deploy.roles import NODE_POWER
from slurmforge.deploy.slurm import ctl
from tests.common import dump_yaml, load_yaml
from tests.unit.kube import containers_of, pod_of, rendered_kube


def _elastic_checkout(checkout) -> tuple[Path, Path]:
    """The k8s unit cluster (tests/unit/kube.py) with its cpu set elastic: 1 always, 3 at most."""
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())
    cpu = next(ns for ns in data["nodesets"] if ns["name"] == "cpu")
    del cpu["replicas"]
    cpu["elastic"] = {"min": 1, "max": 3, "idle": "2m", "start_timeout": "3m"}
    cluster_file.write_text(dump_yaml(data, sort_keys=False))
    return cluster_file, root


def _objects(kube) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in kube.manifests.objects.values()}


def test_each_elastic_node_is_a_deployment_of_none_named_after_it(checkout) -> None:
    kube = rendered_kube(*_elastic_checkout(checkout))
    kube.manifests.validate()  # against the API's own schemas
    objects = _objects(kube)
    assert objects[("StatefulSet", "cpu")]["spec"]["replicas"] == 1  # cpu-0 always runs
    for node in ("cpu-1", "cpu-2"):
        spec = objects[("Deployment", node)]["spec"]
        assert spec["replicas"] == 0 and spec["strategy"] == {"type": "Recreate"}
        pod = spec["template"]["spec"]
        # node.slurm-nodes, as the set's other nodes are
        assert (pod["hostname"], pod["subdomain"]) == (node, "slurm-nodes")
        (slurmd,) = pod["containers"]
        assert slurmd["args"][-1] == "-b" and "$(POD_NAME)" in slurmd["args"]
        assert {"name": "POD_NAME", "value": node} in slurmd["env"]
        assert "lifecycle" not in slurmd  # no drain when Slurm stops it
        assert spec["selector"]["matchLabels"]["slurmforge.io/node"] == node
    assert ("Deployment", "cpu-0") not in objects
    assert ("Deployment", "a100-0") not in objects  # a fixed set has none


def test_slurm_finds_a_started_node_at_the_address_it_registers_from(checkout) -> None:
    kube = rendered_kube(*_elastic_checkout(checkout))
    conf = _objects(kube)[("ConfigMap", "slurm-config")]["data"]
    lines = conf["slurm.conf"].splitlines()
    assert any(ln.startswith("NodeName=cpu-0 NodeAddr=cpu-0.slurm-nodes ") for ln in lines)
    cloud = [ln for ln in lines if ln.startswith("NodeName=cpu-[1-2] ")]
    assert len(cloud) == 1 and "State=CLOUD" in cloud[0] and "NodeAddr" not in cloud[0]
    assert "SlurmctldParameters=cloud_reg_addrs" in lines
    assert "SuspendExcNodes=cpu-0,a100-[0-2]" in lines  # every node that always runs
    assert "power-resume" in conf and "power-suspend" in conf


def test_only_node_power_holds_a_token_that_scales_only_those_deployments(checkout) -> None:
    kube = rendered_kube(*_elastic_checkout(checkout))
    objects = _objects(kube)
    (rule,) = objects[("Role", NODE_POWER)]["rules"]
    assert rule == {
        "apiGroups": ["apps"],
        "resources": ["deployments/scale"],
        "resourceNames": ["cpu-1", "cpu-2"],
        "verbs": ["get", "patch"],
    }
    binding = objects[("RoleBinding", NODE_POWER)]
    assert binding["roleRef"]["name"] == NODE_POWER
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NODE_POWER, "namespace": "hpc"}
    ]
    assert [k for k in objects if k[0] in ("ClusterRole", "ClusterRoleBinding")] == []
    ctld = pod_of(objects[("StatefulSet", "slurmctld")])
    assert ctld["serviceAccountName"] == NODE_POWER and not ctld["automountServiceAccountToken"]
    slurmctld, agent = ctld["containers"]
    token = next(v for v in ctld["volumes"] if v["name"] == access.token_volume(NODE_POWER))
    assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}} in token[
        "projected"
    ]["sources"]
    assert [m["mountPath"] for m in agent["volumeMounts"]] == [
        "/run/slurmforge/power",
        access.TOKEN_DIR,
    ]
    assert access.token_volume(NODE_POWER) not in {m["name"] for m in slurmctld["volumeMounts"]}
    assert {"name": "power", "mountPath": "/run/slurmforge/power"} in slurmctld["volumeMounts"]
    assert {"name": "NODE_POWER_ENGINE", "value": "kubernetes"} in agent["env"]
    assert {"name": "NODE_POWER_NODES", "value": "cpu-1,cpu-2"} in agent["env"]
    caps = agent["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE"]}
    # no other pod runs as an account, and no other container mounts a token
    for key, obj in objects.items():
        pod = pod_of(obj)
        if pod is None or key == ("StatefulSet", "slurmctld"):
            continue
        assert "serviceAccountName" not in pod, key
        assert pod["automountServiceAccountToken"] is False, key
        for container in containers_of(obj):
            paths = [m["mountPath"] for m in container.get("volumeMounts", [])]
            assert access.TOKEN_DIR not in paths, key


def test_a_fixed_cluster_renders_no_account_and_no_agent(checkout) -> None:
    kube = rendered_kube(*checkout)
    objects = _objects(kube)
    assert [k for k in objects if k[0] in ("ServiceAccount", "Role", "RoleBinding")] == []
    ctld = pod_of(objects[("StatefulSet", "slurmctld")])
    assert [c["name"] for c in ctld["containers"]] == ["slurmctld"]
    assert "serviceAccountName" not in ctld


def test_a_redeploy_keeps_the_nodes_slurm_started_and_removes_those_it_no_longer_has(
    checkout,
) -> None:
    """cpu-2 runs (Slurm started it); cpu-7 is left from a larger max."""
    running = {
        "items": [
            {"metadata": {"name": "cpu-1"}, "spec": {"replicas": 0}},
            {"metadata": {"name": "cpu-2"}, "spec": {"replicas": 1}},
            {"metadata": {"name": "cpu-7"}, "spec": {"replicas": 1}},
        ]
    }
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        out = json.dumps(running if "deployments" in argv else {"items": []})
        return subprocess.CompletedProcess(argv, 0, out, "")

    kube = rendered_kube(*_elastic_checkout(checkout), run)
    gone = power.keep_running(kube)
    assert gone == ["cpu-7"]
    written = load_yaml((kube.dir / "deployment-cpu-2.yaml").read_text())
    assert written["spec"]["replicas"] == 1
    assert load_yaml((kube.dir / "deployment-cpu-1.yaml").read_text())["spec"]["replicas"] == 0
    power.remove(kube, gone, 60)
    (delete,) = [c for c in calls if "delete" in c]
    assert "deployment/cpu-7" in delete and "deployment/cpu-2" not in delete


def test_a_redeploy_with_no_elastic_set_left_removes_every_elastic_node(checkout) -> None:
    """The cluster file made its elastic set fixed: the Deployments of its former elastic nodes
    go (the set's StatefulSet takes the names)."""
    running = {
        "items": [{"metadata": {"name": f"cpu-{i}"}, "spec": {"replicas": 1}} for i in (1, 2)]
    }

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        out = json.dumps(running if "deployments" in argv else {"items": []})
        return subprocess.CompletedProcess(argv, 0, out, "")

    kube = rendered_kube(*checkout, run)
    assert not power.nodes(kube.cluster.spec)
    assert power.keep_running(kube) == ["cpu-1", "cpu-2"]


def test_the_nodes_slurm_has_powered_up_are_scaled_up_when_their_deployments_are_at_zero(
    checkout,
) -> None:
    """After a restore: Slurm's saved state has cpu-1 up (it ran at the backup) and cpu-2
    powered down, while both Deployments are at zero. cpu-1 alone is started, and waited for
    until it is in service."""
    scales = {"cpu-1": 0, "cpu-2": 0}
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "scale" in argv:
            scales.update({a.removeprefix("deployment/"): 1 for a in argv if "deployment/" in a})
        if "deployments" in argv:
            items = [{"metadata": {"name": n}, "spec": {"replicas": r}} for n, r in scales.items()]
            return subprocess.CompletedProcess(argv, 0, json.dumps({"items": items}), "")
        if "scontrol show node -o cpu-1" in argv:  # its slurmd's start, once its pod runs
            start = "2026-11-28T00:24:01" if scales["cpu-1"] else "2026-11-28T00:10:00"
            out = f"NodeName=cpu-1 SlurmdStartTime={start} State=ALLOCATED\n"
            return subprocess.CompletedProcess(argv, 0, out, "")
        if ctl.NODES in argv:  # cpu-1 registers once its pod runs
            cpu1 = "idle" if scales["cpu-1"] else "idle*"
            out = f"cpu-0|idle|none\ncpu-1|{cpu1}|none\ncpu-2|idle~|none\n"
            return subprocess.CompletedProcess(argv, 0, out, "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    kube = rendered_kube(*_elastic_checkout(checkout), run)
    power.start_powered_up(kube, {}, 60)
    (scale,) = [c for c in calls if "scale" in c]
    assert scale[scale.index("scale") + 1 :] == ["deployment/cpu-1", "--replicas=1"]
    assert scales == {"cpu-1": 1, "cpu-2": 0}
    calls.clear()
    power.start_powered_up(kube, {}, 60)  # nothing more to start
    assert not [c for c in calls if "scale" in c]


def test_an_elastic_gpu_nodes_pod_asks_for_its_gpus_and_mounts_the_driver_as_a_fixed_one(
    checkout,
) -> None:
    """The a100 set elastic, its first node always running: the other nodes' Deployments run
    the same pod as the set's StatefulSet (GPUs requested, the driver's host paths, GPU nodes
    only), each as its own host."""
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())
    a100 = next(ns for ns in data["nodesets"] if ns["name"] == "a100")
    del a100["replicas"]
    a100["elastic"] = {"min": 1, "max": 3}
    cluster_file.write_text(dump_yaml(data, sort_keys=False))
    kube = rendered_kube(cluster_file, root)
    kube.manifests.validate()
    objects = _objects(kube)
    fixed = pod_of(objects[("StatefulSet", "a100")])
    assert objects[("StatefulSet", "a100")]["spec"]["replicas"] == 1
    for node in ("a100-1", "a100-2"):
        pod = pod_of(objects[("Deployment", node)])
        (slurmd,), (fixed_slurmd,) = pod["containers"], fixed["containers"]
        assert slurmd["resources"] == fixed_slurmd["resources"]
        assert slurmd["resources"]["limits"]["nvidia.com/gpu"] == "5"
        assert slurmd["volumeMounts"] == fixed_slurmd["volumeMounts"]
        assert pod["volumes"] == fixed["volumes"] and pod["affinity"] == fixed["affinity"]
        assert any("hostPath" in v for v in pod["volumes"])
        assert pod["hostname"] == node
