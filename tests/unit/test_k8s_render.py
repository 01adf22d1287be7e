"""The k8s target's manifests: every object valid and kustomize-rendered, their structure, node
sets, GPUs and storage, what rolls pods and what does not, security contexts and admission."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from slurmforge import state
from slurmforge.deploy import loader, roles
from slurmforge.deploy.k8s import images as k8s_images
from slurmforge.deploy.k8s.kubectl import kubectl_path
from slurmforge.deploy.k8s.objects import secret_env
from slurmforge.versions import load as load_versions
from tests.common import dump_yaml, load_yaml
from tests.unit.kube import POD_OWNERS, cluster_data, containers_of, pod_of, rendered_kube


def test_every_object_is_valid_and_kustomize_renders_the_directory(checkout) -> None:
    cluster_file, root = checkout
    kube = rendered_kube(cluster_file, root)
    assert kube.manifests.validate() == ["1.29", "1.30", "1.31", "1.32"]
    out = subprocess.run(
        [kubectl_path(), "kustomize", str(kube.dir)], capture_output=True, text=True, check=True
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "Namespace",
            *("ConfigMap",) * 3,  # the nodes', the jail's, slurmdbd's
            "PersistentVolumeClaim",
            "Job",
            *("Service",) * 7,  # slurmctld, nodes, login, mariadb, slurmdbd, slurmrestd, exporter
            *("StatefulSet",) * 5,  # slurmctld, cpu, a100, login, mariadb
            *("Deployment",) * 3,  # slurmdbd, slurmrestd, exporter
            *("PodDisruptionBudget",) * 2,  # cpu, a100
            "CronJob",
            # the cluster's pods from each other; mariadb from slurmdbd's alone; from anywhere,
            # the ports login, slurmrestd and the exporter are reached on
            *("NetworkPolicy",) * 5,
            # for a Prometheus Operator, applied where the API serves them
            "ServiceMonitor",
            "PrometheusRule",
        ]
    )
    # the kustomization names every file, each file holds one object, all in one namespace
    listed = load_yaml((kube.dir / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in kube.dir.iterdir() if p.name != "kustomization.yaml"
    )
    assert {d["metadata"].get("namespace", d["metadata"]["name"]) for d in docs} == {"hpc"}


def test_structure(checkout) -> None:
    cluster_file, root = checkout
    kube = rendered_kube(cluster_file, root)
    lock = state.read_images_lock(root)
    pinned = {f"{ref.rsplit(':', 1)[0]}@{digest}" for ref, digest in lock.items()}
    objects = kube.manifests.objects
    # what runs pods, and so what the checks below must each have looked at (a positive control:
    # a workload whose pod this test could not find would otherwise pass unchecked)
    workloads = {n for n, o in objects.items() if o["kind"] in (*POD_OWNERS, "CronJob")}
    assert {"statefulset-slurmctld.yaml", "statefulset-cpu.yaml", "statefulset-a100.yaml"} <= (
        workloads
    )
    looked_at: dict[str, int] = {}
    for name, obj in objects.items():
        labels = obj["metadata"]["labels"]
        for key in ("name", "instance", "component", "version", "part-of"):
            assert labels.get(f"app.kubernetes.io/{key}"), (name, key)
        assert labels["app.kubernetes.io/instance"] == "train"
        pod = pod_of(obj)
        if pod is None:
            assert name not in workloads, name
            continue
        volumes = {v["name"]: v for v in pod["volumes"]}
        for claim in obj["spec"].get("volumeClaimTemplates", []):
            volumes[claim["metadata"]["name"]] = claim
        for c in containers_of(obj):
            # every image comes from the build, pinned by the digest push recorded
            assert c["image"] in pinned, (name, c["image"])
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, (name, m["name"])
                if "hostPath" in volumes[m["name"]]:
                    assert m["readOnly"] is True, (name, m)
            sc = c["securityContext"]
            assert sc["capabilities"]["drop"] == ["ALL"] and sc["privileged"] is False
            # the API server refuses allowPrivilegeEscalation: false next to SYS_ADMIN
            if "SYS_ADMIN" in sc["capabilities"].get("add", []):
                assert sc["allowPrivilegeEscalation"] is True
            # only slurmd, which starts users' containers, goes without a seccomp profile
            seccomp = "Unconfined" if c["name"] == "slurmd" else "RuntimeDefault"
            assert sc["seccompProfile"] == {"type": seccomp}, (name, c["name"])
            assert c["resources"]["requests"] and c["resources"]["limits"]
            looked_at[name] = looked_at.get(name, 0) + 1
        template_labels = (
            obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
            if obj["kind"] == "CronJob"
            else obj["spec"]["template"]["metadata"]["labels"]
        )
        assert template_labels["app.kubernetes.io/part-of"] == "slurmforge"
    assert set(looked_at) == workloads  # every container of every workload was checked


def test_node_sets_gpus_and_storage_follow_the_model(checkout) -> None:
    cluster_file, root = checkout
    objects = rendered_kube(cluster_file, root).manifests.objects
    gpu = objects["statefulset-a100.yaml"]
    assert gpu["spec"]["replicas"] == 3 and gpu["spec"]["serviceName"] == "slurm-nodes"
    (c,) = gpu["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"] == {"cpu": "8", "memory": "65536Mi", "nvidia.com/gpu": "5"}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert c["image"].split("@")[0].endswith("/worker")
    host_paths = [
        v["hostPath"] for v in gpu["spec"]["template"]["spec"]["volumes"] if "hostPath" in v
    ]
    assert [h["path"] for h in host_paths] == [
        "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
        "/run/nvidia/driver/usr/bin",
    ]
    affinity = gpu["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
            ]
        }
    ]
    cpu = objects["statefulset-cpu.yaml"]
    (c,) = cpu["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    # a pod being deleted drains its node; its jobs get node_grace_seconds, and the pod's grace
    # holds the requeue of what still runs then and slurmd's stop
    assert c["lifecycle"]["preStop"]["exec"]["command"] == [
        "/usr/lib/slurmforge/node-state",
        "stopping",
    ]
    assert cpu["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 90
    # a PID 1 that reaps: slurmd would leave every exited slurmstepd a zombie
    assert cpu["spec"]["template"]["spec"]["shareProcessNamespace"] is True
    assert {"name": "NODE_STATE_GRACE", "value": "60"} in c["env"]
    # the drain's reason names the Kubernetes node the pod ran on
    env = {e["name"]: e for e in c["env"]}
    assert env["KUBE_NODE"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NODE_STATE_REASON"]["value"] == "pod stopping on kubernetes node $(KUBE_NODE)"
    assert not [v for v in cpu["spec"]["template"]["spec"]["volumes"] if "hostPath" in v]
    jail = objects["pvc-jail.yaml"]["spec"]
    assert jail["accessModes"] == ["ReadWriteMany"]
    assert jail["storageClassName"] == "nfs-client"
    assert jail["resources"]["requests"]["storage"] == "200Gi"
    assert objects["service-login.yaml"]["spec"]["type"] == "NodePort"
    conf = objects["configmap-slurm-config.yaml"]["data"]
    assert (
        "SlurmctldHost=slurmctld-0(slurmctld-0.slurmctld)\nSlurmUser=slurm\n" in conf["slurm.conf"]
    )
    assert "NodeName=a100-2 NodeAddr=a100-2.slurm-nodes CPUs=8" in conf["slurm.conf"]
    # the gpu layer's gpu:1 and the node set's gpu:a100:4 (string lists are united)
    assert "NodeName=a100-[0-2] Name=gpu Count=1" in conf["gres.conf"]
    assert "NodeName=a100-[0-2] Name=gpu Type=a100 Count=4" in conf["gres.conf"]
    check = objects["cronjob-gpu-health-check.yaml"]["spec"]
    args = check["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "srun -p train -N 3 --ntasks-per-node=1" in args[-1] and "--min-busbw 150" in args[-1]
    # every GPU of each node (a job step sees only the GPUs it is given)
    assert "--exclusive --gres=gpu:5 " in args[-1]


def test_populate_job_is_named_after_everything_that_defines_it(checkout, write_cluster) -> None:
    cluster_file, root = checkout
    kube = rendered_kube(cluster_file, root)
    digest = state.read_images_lock(root)[kube.cluster.images["jail"]]
    (name,) = [n for n in kube.manifests.objects if n.startswith("job-jail-populate-")]
    job = kube.manifests.objects[name]
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLURMFORGE_JAIL_DIGEST"] == digest
    # every pod that mounts the jail waits for exactly this populate
    mounting = []
    for obj_name, obj in kube.manifests.objects.items():
        pod = pod_of(obj)
        if pod and obj["kind"] != "Job" and any(v["name"] == "jail" for v in pod["volumes"]):
            assert digest in pod["initContainers"][0]["command"][-1], obj_name
            mounting.append(obj["metadata"]["name"])
    assert sorted(mounting) == [
        *("a100", "cpu", "exporter", "gpu-health-check", "login", "slurmctld", "slurmdbd"),
        "slurmrestd",
    ]
    # same inputs, same Job (a redeploy leaves it alone); a changed jail.keep, a new Job, whose
    # template the API server would otherwise refuse to change
    assert rendered_kube(cluster_file, root).manifests.populate_job == kube.manifests.populate_job
    kept = write_cluster({**load_yaml(cluster_file.read_text()), "jail": {"keep": ["/srv/"]}})
    assert rendered_kube(kept, root).manifests.populate_job != kube.manifests.populate_job


def test_node_counts_change_the_config_but_roll_no_pod(checkout, write_cluster) -> None:
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())

    def rendered(data: dict) -> tuple[dict, dict]:
        objects = rendered_kube(write_cluster(data), root).manifests.objects
        hashes = {
            n: _template(o)["metadata"]["annotations"]["slurmforge.io/config-hash"]
            for n, o in objects.items()
            # every pod that reads slurm.conf
            if pod_of(o)
            and o["kind"] != "Job"
            and any(v["name"] == "slurm-config" for v in pod_of(o)["volumes"])
        }
        return objects["configmap-slurm-config.yaml"]["data"]["slurm.conf"], hashes

    conf, hashes = rendered(data)
    for count in (0, 5):  # scaled down to nothing, or up
        data["nodesets"][0]["replicas"] = count
        scaled_conf, scaled_hashes = rendered(data)
        assert scaled_conf != conf  # the nodes learn the new list (live, see k8s/config_sync.py)
        assert scaled_hashes == hashes  # but no pod template changes
    data["partitions"][1]["default"] = True
    data["partitions"][0]["default"] = False
    _, other = rendered(data)
    assert all(other[n] != h for n, h in hashes.items())  # any other change rolls them


def _template(obj: dict) -> dict:
    spec = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj["spec"]
    return spec["template"]


def test_pods_get_no_token_and_the_munge_key_collides_with_nothing(checkout) -> None:
    cluster_file, root = checkout
    kube = rendered_kube(cluster_file, root)
    for name, obj in kube.manifests.objects.items():
        pod = pod_of(obj)
        if pod is None:
            continue
        assert pod["automountServiceAccountToken"] is False, name
        for c in containers_of(obj):
            for m in c.get("volumeMounts", []):
                assert not m["mountPath"].startswith(("/run/secrets", "/var/run/secrets")), name
                if m["name"] == "munge-key":
                    assert m["mountPath"] == roles.MUNGE.dir
                    assert secret_env(roles.MUNGE) in c["env"], (name, c["name"])
            for port in c.get("ports", []):
                assert port["protocol"] == "TCP", (name, port)
            # slurmctld, slurmd and sshd log an empty connection as an error: never a probe's
            connected = c.get("readinessProbe", {}).get("tcpSocket", {}).get("port")
            assert connected not in (6817, 6818, 22), (name, c["name"])
        if obj["kind"] == "Service":
            assert all(p["protocol"] == "TCP" for p in obj["spec"]["ports"]), name


def test_slurmctld_hands_its_state_volume_to_slurm_with_chown_alone(checkout) -> None:
    cluster_file, root = checkout
    pod = pod_of(rendered_kube(cluster_file, root).manifests.objects["statefulset-slurmctld.yaml"])
    owner = next(c for c in pod["initContainers"] if c["name"] == "state-owner")
    assert owner["command"] == ["chown", "slurm:slurm", "/var/spool/slurmctld"]
    assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert owner["securityContext"]["allowPrivilegeEscalation"] is False


def test_overcommit_lowers_what_node_pods_request_not_their_limits(checkout, write_cluster) -> None:
    cluster_file, root = checkout
    limits = {"cpu": "8", "memory": "65536Mi", "nvidia.com/gpu": "5"}  # GPUs are never shared
    exact = pod_of(rendered_kube(cluster_file, root).manifests.objects["statefulset-a100.yaml"])
    assert exact["containers"][0]["resources"] == {"requests": limits, "limits": limits}
    data = load_yaml(cluster_file.read_text())
    over = write_cluster({**data, "kubernetes": {**data["kubernetes"], "overcommit": True}})
    pod = pod_of(rendered_kube(over, root).manifests.objects["statefulset-a100.yaml"])
    assert pod["containers"][0]["resources"] == {
        "requests": {**limits, "cpu": "100m", "memory": "128Mi"},
        "limits": limits,
    }


def test_namespace_admits_privileged_pods_only_by_its_labels(checkout) -> None:
    cluster_file, root = checkout
    labels = rendered_kube(cluster_file, root).manifests.objects["namespace.yaml"]["metadata"][
        "labels"
    ]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"


def test_registry_override_moves_and_pins_images(write_cluster, tmp_path) -> None:
    versions = load_versions(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster = loader.load(
        write_cluster(cluster_data(registry="registry.example.com/hpc")), versions
    )
    moved = {
        c: "registry.example.com/hpc/" + r.rsplit("/", 1)[1] for c, r in cluster.images.items()
    }
    lock = {moved["jail"]: "sha256:" + "a" * 64}
    images = k8s_images.resolve(cluster, lock)
    assert images.refs["jail"] == moved["jail"].rsplit(":", 1)[0] + "@sha256:" + "a" * 64
    assert images.refs["slurmctld"] == moved["slurmctld"]  # not pushed there: by tag
    assert images.jail_digest == "sha256:" + "a" * 64


def test_validation_catches_a_field_the_schema_lacks(checkout) -> None:
    cluster_file, root = checkout
    kube = rendered_kube(cluster_file, root)
    path = kube.dir / "statefulset-login.yaml"
    obj = load_yaml(path.read_text())
    obj["spec"]["template"]["spec"]["containers"][0]["privilegedd"] = True
    path.write_text(dump_yaml(obj))
    with pytest.raises(Exception, match=r"statefulset-login.yaml: invalid for Kubernetes 1.29 at "):
        kube.manifests.validate()


def test_each_node_set_has_a_budget_that_selects_its_pods_alone(checkout) -> None:
    cluster_file, root = checkout
    objects = rendered_kube(cluster_file, root).manifests.objects
    budgets = {
        o["metadata"]["name"]: o for o in objects.values() if o["kind"] == "PodDisruptionBudget"
    }
    sets = {o["metadata"]["name"]: o for n, o in objects.items() if n.startswith("statefulset-")}
    assert set(budgets) <= set(sets) and "a100" in budgets
    for name, budget in budgets.items():
        assert budget["apiVersion"] == "policy/v1"
        assert budget["spec"]["maxUnavailable"] == 1  # disruption.max_unavailable's default
        chosen = budget["spec"]["selector"]["matchLabels"]
        for other, stateful_set in sets.items():
            labels = stateful_set["spec"]["template"]["metadata"]["labels"]
            assert (chosen.items() <= labels.items()) == (other == name), (name, other)
