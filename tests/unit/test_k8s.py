"""The `k8s` target: the kustomize directory rendered from the cluster model, its validation, and
the kubectl calls of `invoke deploy --target k8s`.

Offline: the manifests are checked by kubernetes-validate (strict OpenAPI schemas of each
configured version) and by the real `kubectl kustomize` (client-side); the apply path is checked
by the exact kubectl argv it runs, against a recording stand-in for kubectl's answers (the only
fake in this file). tests/k8s deploys the same directory on a real API server and kubelet.
"""

from __future__ import annotations

import base64
import json
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge import state
from slurmforge.deploy import open_target, roles
from slurmforge.deploy.k8s import apply as k8s_apply
from slurmforge.deploy.k8s import images as k8s_images
from slurmforge.deploy.k8s import secrets as k8s_secrets
from slurmforge.deploy.k8s.kubectl import kubectl_path
from slurmforge.deploy.k8s.objects import secret_env
from slurmforge.deploy.k8s.run import Kube
from slurmforge.deploy.slurm import ctl as slurmctl
from slurmforge.deploy.spec import loader
from slurmforge.deploy.target import Where
from slurmforge.errors import ConfigError, DeployError
from slurmforge.versions import load as load_versions
from tests.unit.test_cli import _assert_clean_failure, _invoke
from tests.unit.test_deploy import _with

POD_OWNERS = {"StatefulSet", "Deployment", "Job"}


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
    versions = load_versions(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster_file = write_cluster(_cluster_data())
    cluster = loader.load(cluster_file, versions)
    lock = {ref: f"sha256:{i:064x}" for i, ref in enumerate(sorted(cluster.images.values()))}
    (tmp_path / "build").mkdir()
    (tmp_path / state.IMAGES_LOCK).write_text(json.dumps(lock))
    return cluster_file, tmp_path


def _kube(cluster_file: Path, root: Path, run=None, **kw: Any) -> Kube:
    versions = load_versions(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster = loader.load(cluster_file, versions)
    if run is not None:
        kw["run"] = run
    kube = Kube(cluster, root / "out", root, None, **kw)
    kube.manifests.write()
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
            "CronJob",
            # for a Prometheus Operator, applied where the API serves them
            "ServiceMonitor",
            "PrometheusRule",
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
    lock = state.read_images_lock(root)
    pinned = {f"{ref.rsplit(':', 1)[0]}@{digest}" for ref, digest in lock.items()}
    for name, obj in kube.manifests.objects.items():
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
    objects = _kube(cluster_file, root).manifests.objects
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
    # a pod being deleted drains its node; its jobs get the grace period, less slurmd's stop
    assert c["lifecycle"]["preStop"]["exec"]["command"] == [
        "/usr/lib/slurmforge/node-state",
        "stopping",
    ]
    assert cpu["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    # a PID 1 that reaps: slurmd would leave every exited slurmstepd a zombie
    assert cpu["spec"]["template"]["spec"]["shareProcessNamespace"] is True
    assert {"name": "NODE_STATE_GRACE", "value": "55"} in c["env"]
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
    kube = _kube(cluster_file, root)
    digest = state.read_images_lock(root)[kube.cluster.images["jail"]]
    (name,) = [n for n in kube.manifests.objects if n.startswith("job-jail-populate-")]
    job = kube.manifests.objects[name]
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLURMFORGE_JAIL_DIGEST"] == digest
    # every pod that mounts the jail waits for exactly this populate
    mounting = []
    for obj_name, obj in kube.manifests.objects.items():
        pod = _pod(obj)
        if pod and obj["kind"] != "Job" and any(v["name"] == "jail" for v in pod["volumes"]):
            assert digest in pod["initContainers"][0]["command"][-1], obj_name
            mounting.append(obj["metadata"]["name"])
    assert sorted(mounting) == [
        *("a100", "cpu", "exporter", "gpu-health-check", "login", "slurmctld", "slurmdbd"),
        "slurmrestd",
    ]
    # same inputs, same Job (a redeploy leaves it alone); a changed jail.keep, a new Job, whose
    # template the API server would otherwise refuse to change
    assert _kube(cluster_file, root).manifests.populate_job == kube.manifests.populate_job
    kept = write_cluster({**yaml.safe_load(cluster_file.read_text()), "jail": {"keep": ["/srv/"]}})
    assert _kube(kept, root).manifests.populate_job != kube.manifests.populate_job


def test_node_counts_change_the_config_but_roll_no_pod(checkout, write_cluster) -> None:
    cluster_file, root = checkout
    data = yaml.safe_load(cluster_file.read_text())

    def rendered(data: dict) -> tuple[dict, dict]:
        objects = _kube(write_cluster(data), root).manifests.objects
        hashes = {
            n: _template(o)["metadata"]["annotations"]["slurmforge.io/config-hash"]
            for n, o in objects.items()
            # every pod that reads slurm.conf
            if _pod(o)
            and o["kind"] != "Job"
            and any(v["name"] == "slurm-config" for v in _pod(o)["volumes"])
        }
        return objects["configmap-slurm-config.yaml"]["data"]["slurm.conf"], hashes

    conf, hashes = rendered(data)
    for count in (0, 5):  # scaled down to nothing, or up
        data["nodesets"][0]["replicas"] = count
        scaled_conf, scaled_hashes = rendered(data)
        assert scaled_conf != conf  # the nodes learn the new list (live, see Kube.sync_config)
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
    kube = _kube(cluster_file, root)
    for name, obj in kube.manifests.objects.items():
        pod = _pod(obj)
        if pod is None:
            continue
        assert pod["automountServiceAccountToken"] is False, name
        for c in _containers(obj):
            for m in c.get("volumeMounts", []):
                assert not m["mountPath"].startswith(("/run/secrets", "/var/run/secrets")), name
                if m["name"] == "munge-key":
                    assert m["mountPath"] == roles.MUNGE.dir
                    assert secret_env(roles.MUNGE) in c["env"], (name, c["name"])
            for port in c.get("ports", []):
                assert port["protocol"] == "TCP", (name, port)
            if "readinessProbe" in c:
                assert "tcpSocket" not in c["readinessProbe"], (name, c["name"])
        if obj["kind"] == "Service":
            assert all(p["protocol"] == "TCP" for p in obj["spec"]["ports"]), name


def test_slurmctld_hands_its_state_volume_to_slurm_with_chown_alone(checkout) -> None:
    cluster_file, root = checkout
    pod = _pod(_kube(cluster_file, root).manifests.objects["statefulset-slurmctld.yaml"])
    owner = next(c for c in pod["initContainers"] if c["name"] == "state-owner")
    assert owner["command"] == ["chown", "slurm:slurm", "/var/spool/slurmctld"]
    assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert owner["securityContext"]["allowPrivilegeEscalation"] is False


def test_overcommit_lowers_what_node_pods_request_not_their_limits(checkout, write_cluster) -> None:
    cluster_file, root = checkout
    limits = {"cpu": "8", "memory": "65536Mi", "nvidia.com/gpu": "5"}  # GPUs are never shared
    exact = _pod(_kube(cluster_file, root).manifests.objects["statefulset-a100.yaml"])
    assert exact["containers"][0]["resources"] == {"requests": limits, "limits": limits}
    data = yaml.safe_load(cluster_file.read_text())
    over = write_cluster({**data, "kubernetes": {**data["kubernetes"], "overcommit": True}})
    pod = _pod(_kube(over, root).manifests.objects["statefulset-a100.yaml"])
    assert pod["containers"][0]["resources"] == {
        "requests": {**limits, "cpu": "100m", "memory": "128Mi"},
        "limits": limits,
    }


def test_namespace_admits_privileged_pods_only_by_its_labels(checkout) -> None:
    cluster_file, root = checkout
    labels = _kube(cluster_file, root).manifests.objects["namespace.yaml"]["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"


def _secret_store(existing: dict[str, bytes] | None = None, claim: bool = False):
    """A recording stand-in for kubectl's Secrets: ``existing`` (name → content), a database
    claim when ``claim``, no pods; what each `create secret` read from its file."""
    calls: list[list[str]] = []
    created: dict[str, bytes] = {}
    store = dict(existing or {})

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "secret" in argv and "get" in argv:
            name = argv[argv.index("secret") + 1]
            if name not in store:
                return subprocess.CompletedProcess(argv, 1, "", f'(NotFound): "{name}" not found')
            return subprocess.CompletedProcess(argv, 0, base64.b64encode(store[name]).decode(), "")
        if "pvc" in argv:
            return subprocess.CompletedProcess(argv, 0 if claim else 1, "", "(NotFound)")
        if "create" in argv:
            path = Path(argv[-1].split("=", 2)[2])  # --from-file=KEY=PATH
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            name = argv[argv.index("generic") + 1]
            created[name] = store[name] = path.read_bytes()
        if "delete" in argv:
            del store[argv[-1]]
        out = json.dumps({"items": []}) if argv[-1] == "json" else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    return calls, run, created


def test_no_secret_in_the_rendered_directory(checkout) -> None:
    """The Secrets are created by deploy, each from a private file removed right after; the
    directory only refers to them by name."""
    cluster_file, root = checkout
    calls, run, created = _secret_store()
    kube = _kube(cluster_file, root, run)
    assert kube.secrets.ensure() is False
    assert sorted(created) == ["db-password", "jwt-key", "munge-key"]
    assert [len(created[n]) for n in ("munge-key", "jwt-key")] == [1024, 64]
    assert re.fullmatch(rb"[A-Za-z0-9_-]{43}", created["db-password"])  # as mariadb-init wants
    files = [Path(c[-1].split("=", 2)[2]) for c in calls if "create" in c]
    assert not [f for f in files if f.exists() or f.parent.exists()]  # the temporary files
    assert not [o for o in kube.manifests.objects.values() if o["kind"] == "Secret"]
    for path in kube.dir.iterdir():
        data = path.read_bytes()
        for secret in created.values():
            assert secret[:24] not in data, path
    # a redeploy makes none again
    calls.clear()
    assert kube.secrets.ensure() is False
    assert not [c for c in calls if "create" in c or "delete" in c]


def test_each_secret_is_mounted_only_where_it_is_used(checkout) -> None:
    cluster_file, root = checkout
    kube = _kube(cluster_file, root)
    users: dict[str, set[str]] = {}
    by_name = {s.secret: s for s in roles.SECRETS.values()}
    for obj in kube.manifests.objects.values():
        for c in _containers(obj):
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            for m in c.get("volumeMounts", []):
                secret = by_name.get(m["name"])
                if secret is None:
                    continue
                users.setdefault(secret.secret, set()).add(c["name"])
                assert m["readOnly"] and m["mountPath"] == secret.dir
                assert env[secret.env] == f"{secret.dir}/{secret.file}"  # where the image reads it
    assert users == {
        "munge-key": {
            *("slurmctld", "slurmd", "login", "slurmdbd", "slurmrestd", "gpu-health-check"),
            "exporter",
        },
        "jwt-key": {"slurmctld", "slurmdbd"},  # slurmrestd passes each request's token on
        "db-password": {"mariadb", "slurmdbd"},
    }


def test_slurmdbd_runs_under_its_dbd_host_and_slurmctld_reaches_it(checkout) -> None:
    cluster_file, root = checkout
    objects = _kube(cluster_file, root).manifests.objects
    dbd_conf = objects["configmap-slurmdbd-config.yaml"]["data"]["slurmdbd.conf"]
    slurm_conf = objects["configmap-slurm-config.yaml"]["data"]["slurm.conf"]
    pod = _pod(objects["deployment-slurmdbd.yaml"])
    assert f"DbdHost={pod['hostname']}\n" in dbd_conf
    assert "\nStoragePass" not in dbd_conf and "StorageHost=mariadb\n" in dbd_conf
    service = objects["service-slurmdbd.yaml"]
    assert f"AccountingStorageHost={service['metadata']['name']}\n" in slurm_conf
    assert service["spec"]["ports"][0]["port"] == 6819
    # one slurmdbd at a time, after the database answers
    assert objects["deployment-slurmdbd.yaml"]["spec"]["strategy"] == {"type": "Recreate"}
    assert "/dev/tcp/mariadb/3306" in pod["initContainers"][-1]["command"][-1]
    database = objects["statefulset-mariadb.yaml"]["spec"]
    assert database["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert k8s_secrets.DATABASE_CLAIM == "data-mariadb-0"  # what check_database looks for
    rest = objects["service-slurmrestd.yaml"]["spec"]
    assert rest["type"] == "NodePort" and rest["ports"][0]["port"] == 6820


def test_an_external_database_replaces_mariadb_and_its_password_follows_the_file(
    checkout, write_cluster, tmp_path
) -> None:
    cluster_file, root = checkout
    password = tmp_path / "db-password"
    password.write_text("site-password-0123456789")
    data = yaml.safe_load(cluster_file.read_text())
    database = {"host": "db.example.org", "port": 3307, "password_secret": str(password)}
    data["accounting"] = {"database": database}
    external = write_cluster(data)
    calls, run, created = _secret_store({"db-password": b"the-old-password-000000"})
    kube = _kube(external, root, run)
    assert not [n for n in kube.manifests.objects if "mariadb" in n]
    wait = _pod(kube.manifests.objects["deployment-slurmdbd.yaml"])["initContainers"][-1]
    assert "/dev/tcp/db.example.org/3307" in wait["command"][-1]
    conf = kube.manifests.objects["configmap-slurmdbd-config.yaml"]["data"]["slurmdbd.conf"]
    assert "StorageHost=db.example.org\nStoragePort=3307\n" in conf
    assert kube.secrets.ensure() is True  # the file changed: the Secret is replaced
    assert created["db-password"] == b"site-password-0123456789"
    assert calls[-2][-3:] == ["delete", "secret", "db-password"]
    assert kube.secrets.ensure() is False  # and then left alone


def test_a_database_claim_without_its_password_secret_is_refused(checkout) -> None:
    cluster_file, root = checkout
    calls, run, _ = _secret_store({"munge-key": b"k"}, claim=True)
    kube = _kube(cluster_file, root, run)
    with pytest.raises(ConfigError) as exc:
        kube.secrets.check_database()  # apply's first step (test_apply_runs_exactly_...)
    assert exc.value.message == (
        f"{cluster_file}: accounting: the database of cluster train exists but its password "
        "Secret is gone"
    )
    assert "data-mariadb-0" in (exc.value.hint or "")
    assert not [c for c in calls if "apply" in c or "create" in c]  # nothing applied or made


def test_accounting_off_renders_no_accounting_object(checkout, write_cluster) -> None:
    cluster_file, root = checkout
    data = yaml.safe_load(cluster_file.read_text())
    data.update(accounting={"enabled": False}, rest={"enabled": False})
    kube = _kube(write_cluster(data), root)
    names = " ".join(kube.manifests.objects)
    assert not [w for w in ("mariadb", "slurmdbd", "slurmrestd") if w in names]
    assert "jwt" not in json.dumps(kube.manifests.objects)
    assert list(kube.secrets.files()) == [roles.MUNGE]


NODES = ("cpu-0", "cpu-1", "a100-0", "a100-1", "a100-2")  # the cluster of _cluster_data


def _server(served: dict[str, list[str]], failing: str = ""):
    """A recording stand-in for kubectl's answers: the kinds served per API version; ``failing``:
    an apply that names this file fails after applying the files before it. No StatefulSets or
    pods exist yet, and slurmctld reports every node idle."""
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[-1] == "json":  # get statefulsets / pods
            return subprocess.CompletedProcess(argv, 0, json.dumps({"items": []}), "")
        if slurmctl.NODES in argv:
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
            objs = [yaml.safe_load(Path(f).read_text()) for f in done]
            out = "".join(
                f"{o['kind'].lower()}/{o['metadata']['name']} serverside-applied\n" for o in objs
            )
            err = "Error from server (Invalid): first\nError from server (Forbidden): second\n"
            return subprocess.CompletedProcess(argv, 1, out, err)
        out = "NODELIST   NODES PARTITION STATE\ncpu-0 1 main* idle\n" if "sinfo" in argv else ""
        return subprocess.CompletedProcess(argv, 0, out, "")  # the munge Secret exists already

    return calls, run


SERVED_121 = {
    "v1": ["Namespace", "ConfigMap", "PersistentVolumeClaim", "Service"],
    "apps/v1": ["StatefulSet", "Deployment"],
    "batch/v1": ["Job", "CronJob"],
}


def test_apply_runs_exactly_these_kubectl_commands(checkout) -> None:
    cluster_file, root = checkout
    calls, run = _server(SERVED_121)
    kube = _kube(cluster_file, root, run, namespace="team-a", context="prod")
    out = k8s_apply.apply(kube, 300)
    kubectl = kubectl_path()
    ctx, ns = ["--context", "prod"], ["--context", "prod", "--namespace", "team-a"]
    # the ServiceMonitor and PrometheusRule: this server serves no monitoring.coreos.com/v1
    objects = kube.manifests.objects.items()
    files = [str(kube.dir / n) for n, o in objects if "coreos" not in o["apiVersion"]]
    apply = [kubectl, *ctx, "apply", "--server-side", "--field-manager=slurmforge"]
    instance, nodes = "app.kubernetes.io/instance=train", "app.kubernetes.io/component=node"
    database = "app.kubernetes.io/component=mariadb"
    exec_ = [kubectl, *ns, "exec", "slurmctld-0", "-c", "slurmctld", "--"]
    sinfo = slurmctl.NODES
    assert (
        calls
        == [
            *([kubectl, *ctx, "get", "--raw", path] for path in ("/api/v1", "/apis/batch/v1")),
            [kubectl, *ctx, "get", "--raw", "/apis/apps/v1"],
            [kubectl, *ctx, "get", "--raw", "/apis/monitoring.coreos.com/v1"],
            # the Slurm a running controller has, for upgrade.check (this one answers nothing)
            [*exec_, "bash", "-c", "scontrol version"],
            # the cluster's own database: its password Secret exists, mariadb-0 does not run
            [kubectl, *ns, "get", "secret", "db-password", "-o", "jsonpath={.data.db-password}"],
            [kubectl, *ns, "get", "pods", "-l", f"{instance},{database}", "-o", "json"],
            [kubectl, *ns, "get", "statefulsets", "-l", f"{instance},{nodes}", "-o", "json"],
            [*exec_, "bash", "-c", sinfo],  # the drains from before, which outlive the apply
            [*apply, "-f", files[0]],  # the Namespace first
            # the Secrets exist already
            [kubectl, *ns, "get", "secret", "munge-key", "-o", "jsonpath={.data.munge\\.key}"],
            [kubectl, *ns, "get", "secret", "jwt-key", "-o", "jsonpath={.data.jwt_hs256\\.key}"],
            [kubectl, *ns, "get", "secret", "db-password", "-o", "jsonpath={.data.db-password}"],
            [*apply, *(a for f in files[1:] for a in ("-f", f))],
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
                    *(f"statefulset/{s}" for s in ("slurmctld", "cpu", "a100", "login", "mariadb")),
                    "deployment/slurmdbd",
                    "deployment/slurmrestd",
                    "deployment/exporter",
                )
            ),
            [kubectl, *ns, "get", "pods", "-l", instance, "-o", "json"],  # their Slurm config
            [*exec_, "bash", "-c", sinfo],  # until every node is in service
            # slurmdbd has the cluster; the default account exists
            [*exec_, "bash", "-c", "sacctmgr -n -P show cluster train format=cluster"],
            [*exec_, "bash", "-c", "sacctmgr -n -P show account default format=account"],
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
    kustomization = yaml.safe_load((kube.dir / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "team-a"


def test_a_kind_the_server_lacks_is_named_not_applied(checkout, capsys) -> None:
    cluster_file, root = checkout
    calls, run = _server({**SERVED_121, "batch/v1": ["Job"]})  # Kubernetes 1.20
    kube = _kube(cluster_file, root, run)
    k8s_apply.apply(kube, 300)
    applied = [a for c in calls if "apply" in c for a in c if a.endswith(".yaml")]
    assert not [a for a in applied if "cronjob" in a]
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

    kube = _kube(cluster_file, root, run)
    with pytest.raises(DeployError, match=r"serves in v1 failed \(exit 1\):\n  The connection"):
        k8s_apply.apply(kube, 300)
    assert not [c for c in calls if "apply" in c]


def test_a_failed_apply_says_every_error_and_what_was_applied(checkout) -> None:
    cluster_file, root = checkout
    _, run = _server(SERVED_121, failing="statefulset-slurmctld.yaml")
    kube = _kube(cluster_file, root, run)
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

    kube = _kube(cluster_file, root, run)
    with pytest.raises(
        Exception, match=r"waiting for job/jail-populate-.* failed \(exit 1\):\n  error: timed out"
    ):
        k8s_apply.apply(kube, 5)


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
def test_bad_kubernetes_settings(write_cluster, tmp_path, kubernetes: dict, expected: str) -> None:
    # what `invoke deploy --target k8s` opens first (the CLI's own path is the test below)
    path = write_cluster(_cluster_data(**kubernetes))
    versions = Path(__file__).resolve().parents[2] / "versions.yaml"
    with pytest.raises(ConfigError) as exc:
        open_target(Where(path, versions, tmp_path / "out", "k8s"))
    assert f"{path}: {expected}" in exc.value.message


def test_bad_kubernetes_settings_through_the_cli(write_cluster) -> None:
    path = write_cluster(_cluster_data(versions=["1.31", "1.99"]))
    proc = _invoke("deploy", "--target", "k8s", "--dry-run", "--cluster", str(path))
    _assert_clean_failure(proc, f"{path}: kubernetes.versions[1]: no schemas for Kubernetes 1.99")


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
    versions = load_versions(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster = loader.load(write_cluster(_cluster_data()), versions)
    with pytest.raises(ConfigError, match=r"\(jail\) is neither pushed nor built"):
        Kube(cluster, tmp_path / "out", tmp_path).manifests.write()


def test_registry_override_moves_and_pins_images(write_cluster, tmp_path) -> None:
    versions = load_versions(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster = loader.load(
        write_cluster(_cluster_data(registry="registry.example.com/hpc")), versions
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
    kube = _kube(cluster_file, root)
    path = kube.dir / "statefulset-login.yaml"
    obj = yaml.safe_load(path.read_text())
    obj["spec"]["template"]["spec"]["containers"][0]["privilegedd"] = True
    path.write_text(yaml.safe_dump(obj))
    with pytest.raises(Exception, match=r"statefulset-login.yaml: invalid for Kubernetes 1.29 at "):
        kube.manifests.validate()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["down", "--target", "k8s"], "invoke down: not supported by --target k8s"),
        (["gpu-check", "--target", "k8s"], "invoke gpu-check: not supported by --target k8s"),
        (["status", "--context", "prod"], "--context: for --target k8s only"),
        (["login", "--namespace", "a"], "--namespace: for --target k8s only"),
    ],
)
def test_a_command_the_target_cannot_carry_out_is_refused_by_it(
    checkout, args: list[str], expected: str
) -> None:
    cluster_file, root = checkout
    proc = _invoke(*args, "--cluster", str(cluster_file), "--out", str(root / "out"))
    _assert_clean_failure(proc, expected)
    assert not (root / "out").exists()  # nothing rendered, nothing applied


def test_status_and_login_on_k8s_run_these_kubectl_commands(checkout) -> None:
    cluster_file, root = checkout
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        out = "slurmctld-0   1/1   Running\n" if "pods" in argv else "cpu-0 1 main* idle\n"
        return subprocess.CompletedProcess(argv, 0, out, "")

    kube = _kube(cluster_file, root, run, namespace="team-a", context="prod")
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
