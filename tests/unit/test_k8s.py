"""The `k8s` target: the kustomize directory rendered from the cluster model, its validation, and
the kubectl calls of `invoke deploy --target k8s`.

No Kubernetes API server can run here. The manifests are checked by kubernetes-validate (strict
OpenAPI schemas of each configured version) and by the real `kubectl kustomize` (client-side);
the apply path is checked by the exact kubectl argv it runs, against a recording stand-in for
kubectl's answers (the only fake in this file).
"""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge import config, push
from slurmforge.deploy import k8s, model
from slurmforge.deploy.kube import Kube, kubectl_path
from slurmforge.errors import ConfigError
from tests.unit.test_cli import _assert_clean_failure, _invoke
from tests.unit.test_deploy import _with

POD_OWNERS = {"StatefulSet", "Job"}


def _cluster_data(**kubernetes: Any) -> dict:
    return _with(
        name="train",
        nodesets=[
            {"name": "cpu", "definitions": ["cpu-small"], "replicas": 2},
            {"name": "a100", "definitions": ["gpu"], "replicas": 3, "gres": ["gpu:a100:4"]},
        ],
        partitions=[
            {"name": "main", "nodesets": ["cpu"], "default": True},
            {"name": "train", "nodesets": ["a100"]},
        ],
        gpu={"driver_root": "/run/nvidia/driver", "min_busbw": 150.0},
        kubernetes={
            "namespace": "hpc",
            "jail": {"storage_class": "nfs-client", "size": "200Gi"},
            "login_service": "NodePort",
            **kubernetes,
        },
    )


@pytest.fixture
def checkout(tmp_path: Path, write_cluster) -> tuple[Path, Path]:
    """A checkout-like dir: versions.yaml, a cluster file and a push lock for every image."""
    versions = config.load(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster_file = write_cluster(_cluster_data())
    cluster = model.load(cluster_file, versions)
    lock = {ref: f"sha256:{i:064x}" for i, ref in enumerate(sorted(cluster.images.values()))}
    (tmp_path / "build").mkdir()
    (tmp_path / push.LOCK_FILE).write_text(json.dumps(lock))
    return cluster_file, tmp_path


def _kube(cluster_file: Path, root: Path, run=None, **kw: Any) -> Kube:
    versions = config.load(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster = model.load(cluster_file, versions)
    if run is not None:
        kw["run"] = run
    kube = Kube(cluster, root / "out", root, None, **kw)
    kube.render()
    return kube


def _containers(obj: dict) -> list[dict]:
    pod = _pod(obj)
    return [*pod.get("initContainers", []), *pod["containers"]] if pod else []


def _pod(obj: dict) -> dict | None:
    if obj["kind"] in POD_OWNERS:
        return obj["spec"]["template"]["spec"]
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def test_every_object_is_valid_and_kustomize_renders_the_directory(checkout) -> None:
    cluster_file, root = checkout
    kube = _kube(cluster_file, root)
    assert kube.validate() == ["1.29", "1.30", "1.31", "1.32"]
    out = subprocess.run(
        [kubectl_path(), "kustomize", str(kube.dir)], capture_output=True, text=True, check=True
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "Namespace",
            "ConfigMap",
            "ConfigMap",
            "PersistentVolumeClaim",
            "Job",
            "Service",
            "Service",
            "Service",
            "StatefulSet",
            "StatefulSet",
            "StatefulSet",
            "StatefulSet",
            "CronJob",
        ]
    )
    # the kustomization names every file, each file holds one object, all in one namespace
    listed = yaml.safe_load((kube.dir / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in kube.dir.iterdir() if p.name != "kustomization.yaml"
    )
    assert {d["metadata"].get("namespace", d["metadata"]["name"]) for d in docs} == {"hpc"}


def test_structure(checkout) -> None:
    cluster_file, root = checkout
    kube = _kube(cluster_file, root)
    lock = push.read_lock(root)
    pinned = {f"{ref.rsplit(':', 1)[0]}@{digest}" for ref, digest in lock.items()}
    for name, obj in kube.objects.items():
        labels = obj["metadata"]["labels"]
        for key in ("name", "instance", "component", "version", "part-of"):
            assert labels.get(f"app.kubernetes.io/{key}"), (name, key)
        assert labels["app.kubernetes.io/instance"] == "train"
        pod = _pod(obj)
        if pod is None:
            continue
        volumes = {v["name"]: v for v in pod["volumes"]}
        for claim in obj["spec"].get("volumeClaimTemplates", []):
            volumes[claim["metadata"]["name"]] = claim
        for c in _containers(obj):
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
        template_labels = (
            obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
            if obj["kind"] == "CronJob"
            else obj["spec"]["template"]["metadata"]["labels"]
        )
        assert template_labels["app.kubernetes.io/part-of"] == "slurmforge"


def test_node_sets_gpus_and_storage_follow_the_model(checkout) -> None:
    cluster_file, root = checkout
    objects = _kube(cluster_file, root).objects
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


def test_populate_job_is_named_after_the_jail_digest(checkout) -> None:
    cluster_file, root = checkout
    kube = _kube(cluster_file, root)
    lock = push.read_lock(root)
    digest = lock[kube.cluster.images["jail"]]
    job = kube.objects[f"job-jail-populate-{digest[7:19]}.yaml"]
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLURMFORGE_JAIL_DIGEST"] == digest
    # every pod that mounts the jail waits for exactly this populate
    for name, obj in kube.objects.items():
        pod = _pod(obj)
        if pod and obj["kind"] == "StatefulSet":
            (wait,) = pod["initContainers"]
            assert digest in wait["command"][-1], name


def test_no_munge_key_in_the_rendered_directory(checkout) -> None:
    """The Secret is created by deploy; the directory only refers to it by name."""
    cluster_file, root = checkout
    calls: list[list[str]] = []
    keys: list[bytes] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "create" in argv:
            path = Path(argv[-1].split("=", 2)[2])
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            keys.append(path.read_bytes())
        return subprocess.CompletedProcess(argv, 1 if "get" in argv else 0, "", "not found")

    kube = _kube(cluster_file, root, run)
    kube.ensure_munge_key()
    (key,) = keys
    assert len(key) == 1024
    assert not Path(calls[-1][-1].split("=", 2)[2]).exists()  # the temporary file is gone
    assert not [o for o in kube.objects.values() if o["kind"] == "Secret"]
    for path in kube.dir.iterdir():
        data = path.read_bytes()
        assert key not in data and key[:32] not in data
        assert (
            b"munge.key" not in data
            or b"secretName: munge-key" in data
            or b"key: munge.key" in data
        )


def test_apply_runs_exactly_these_kubectl_commands(checkout) -> None:
    cluster_file, root = checkout
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        code = 0  # the munge key Secret exists already: no create
        out = "NODELIST   NODES PARTITION STATE\ncpu-0 1 main* idle\n" if "sinfo" in argv else ""
        return subprocess.CompletedProcess(argv, code, out, "")

    kube = _kube(cluster_file, root, run, namespace="team-a", context="prod")
    out = kube.apply(300)
    kubectl = kubectl_path()
    ns = ["--context", "prod", "--namespace", "team-a"]
    digest = push.read_lock(root)[kube.cluster.images["jail"]]
    assert calls == [
        [
            kubectl,
            "--context",
            "prod",
            "apply",
            "--server-side",
            "--field-manager=slurmforge",
            "-k",
            str(root / "out" / "k8s" / "train"),
        ],
        [kubectl, *ns, "get", "secret", "munge-key", "-o", "name"],
        [
            kubectl,
            *ns,
            "wait",
            "--for=condition=complete",
            f"job/jail-populate-{digest[7:19]}",
            "--timeout=300s",
        ],
        [kubectl, *ns, "rollout", "status", "statefulset/slurmctld", "--timeout=300s"],
        [kubectl, *ns, "rollout", "status", "statefulset/cpu", "--timeout=300s"],
        [kubectl, *ns, "rollout", "status", "statefulset/a100", "--timeout=300s"],
        [kubectl, *ns, "rollout", "status", "statefulset/login", "--timeout=300s"],
        [
            kubectl,
            *ns,
            "exec",
            "statefulset/slurmctld",
            "-c",
            "slurmctld",
            "--",
            "sinfo",
            "-N",
            "-l",
        ],
    ]
    assert "cpu-0 1 main* idle" in out
    kustomization = yaml.safe_load((kube.dir / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "team-a"


def test_a_failing_wait_names_the_job(checkout) -> None:
    cluster_file, root = checkout

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        failed = "wait" in argv
        return subprocess.CompletedProcess(argv, 1 if failed else 0, "", "error: timed out")

    kube = _kube(cluster_file, root, run)
    with pytest.raises(
        Exception, match=r"waiting for job/jail-populate-.* failed \(exit 1\): error: timed out"
    ):
        kube.apply(5)


@pytest.mark.parametrize(
    ("kubernetes", "expected"),
    [
        ({"versions": ["1.31", "1.99"]}, "kubernetes.versions[1]: no schemas for Kubernetes 1.99"),
        ({"versions": ["latest"]}, "kubernetes.versions[0]: expected a Kubernetes minor version"),
        ({"jail": {"size": "10 gigs"}}, "kubernetes.jail.size: expected a Kubernetes quantity"),
        ({"state": {"size": "0Gi"}}, "kubernetes.state.size: expected a Kubernetes quantity"),
        (
            {"jail": {"storage_class": "Fast_SSD", "size": "1Ti"}},
            "kubernetes.jail.storage_class: expected a storage class name",
        ),
        ({"login_service": "Ingress"}, "kubernetes.login_service: Input should be"),
    ],
)
def test_bad_kubernetes_settings(write_cluster, kubernetes: dict, expected: str) -> None:
    path = write_cluster(_cluster_data(**kubernetes))
    proc = _invoke("deploy", "--target", "k8s", "--dry-run", "--cluster", str(path))
    _assert_clean_failure(proc, f"{path}: {expected}")


def test_gpu_node_set_without_a_gpu_image_is_refused_for_every_target(write_cluster) -> None:
    data = _cluster_data()
    data["nodesets"][1]["image"] = "slurmd"
    path = write_cluster(data)
    for target in ("k8s", "local"):
        proc = _invoke("deploy", "--target", target, "--cluster", str(path))
        _assert_clean_failure(
            proc,
            f"{path}: nodesets[1].image: node set 'a100' requests GPUs (gpu:1, gpu:a100:4) "
            "but 'slurmd' has no GPU user space; expected worker",
        )


def test_images_neither_pushed_nor_built(write_cluster, tmp_path) -> None:
    versions = config.load(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster = model.load(write_cluster(_cluster_data()), versions)
    with pytest.raises(ConfigError, match=r"\(jail\) is neither pushed nor built"):
        Kube(cluster, tmp_path / "out", tmp_path).render()


def test_registry_override_moves_and_pins_images(write_cluster, tmp_path) -> None:
    versions = config.load(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster = model.load(
        write_cluster(_cluster_data(registry="registry.example.com/hpc")), versions
    )
    moved = {
        c: "registry.example.com/hpc/" + r.rsplit("/", 1)[1] for c, r in cluster.images.items()
    }
    lock = {moved["jail"]: "sha256:" + "a" * 64}
    images = k8s.resolve_images(cluster, lock)
    assert images.refs["jail"] == moved["jail"].rsplit(":", 1)[0] + "@sha256:" + "a" * 64
    assert images.refs["slurmctld"] == moved["slurmctld"]  # not pushed there: by tag
    assert images.jail_digest == "sha256:" + "a" * 64


def test_validation_catches_a_field_the_schema_lacks(checkout) -> None:
    cluster_file, root = checkout
    kube = _kube(cluster_file, root)
    path = kube.dir / "statefulset-login.yaml"
    obj = yaml.safe_load(path.read_text())
    obj["spec"]["template"]["spec"]["containers"][0]["privilegedd"] = True
    path.write_text(yaml.safe_dump(obj))
    with pytest.raises(Exception, match=r"statefulset-login.yaml: invalid for Kubernetes 1.29 at "):
        kube.validate()
