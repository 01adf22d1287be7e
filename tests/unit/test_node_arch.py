"""Node sets of another arch than the cluster's cell (Grace GPU nodes beside amd64 controllers):
which images they run, the jail /usr of their arch, and the input that is refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from slurmforge import config, jail_contract, state
from slurmforge.deploy import loader
from slurmforge.deploy.local import render
from slurmforge.deploy.spec.portal import NOTEBOOK_PATHS
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.common import ROOT, load_yaml
from tests.unit.helpers import assert_clean_failure, run_invoke, secret_files
from tests.unit.kube import rendered_kube

SHIPPED = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())
CELL = "24.05.8-cuda12.9.1-debian12"


@pytest.fixture
def versions() -> config.Config:
    return load_versions(ROOT / "versions.yaml")


def _mixed(arch: str = "arm64", set_name: str = "grace", cell: str | None = CELL) -> dict:
    data = copy.deepcopy(SHIPPED)
    data["images"] = {"set": set_name, **({"cell": cell} if cell else {})}
    data["nodesets"] = [
        {"name": "cpu", "definitions": ["cpu-small"], "replicas": 1},
        {"name": "grace", "definitions": ["cpu-small"], "replicas": 2, "arch": arch},
    ]
    data["partitions"] = [{"name": "main", "nodesets": ["cpu", "grace"], "default": True}]
    return data


def test_a_node_set_of_another_arch_runs_that_arch_s_image_and_jail(
    write_cluster, versions, tmp_path: Path
) -> None:
    cluster = loader.load(write_cluster(_mixed()), versions)
    cpu, grace = cluster.spec.nodesets
    assert (cluster.arch(cpu), cluster.arch(grace)) == ("amd64", "arm64")
    assert cluster.other_arches == ["arm64"]
    registry = "127.0.0.1:5000/slurmforge"
    assert cluster.node_image(cpu) == f"{registry}/slurmd:{CELL}"
    assert cluster.node_image(grace) == f"{registry}/slurmd:{CELL}-arm64"
    assert cluster.image("jail", "arm64") == f"{registry}/jail:{CELL}-arm64"
    assert cluster.images["jail"] == f"{registry}/jail:{CELL}"
    # what the nodes of each arch are built from, in one command
    assert cluster.build_hint == f"invoke build --set grace --cell {CELL} --cell {CELL}-arm64"

    services = render.render(cluster, secret_files(tmp_path), "sha256:abc")["services"]
    usr = f"{render.usr_volume('arm64')}:/jail/usr"
    for node in ("grace-0", "grace-1"):
        assert services[node]["platform"] == "linux/arm64"
        assert services[node]["image"] == cluster.node_image(grace)
        volumes = services[node]["volumes"]
        # the cluster's one jail (homes, accounts, /etc), with the arm64 image's /usr over it
        assert f"jail:{jail_contract.ROOT}" in volumes and usr in volumes
        assert volumes.index(f"jail:{jail_contract.ROOT}") < volumes.index(usr)
    assert "platform" not in services["cpu-0"] and "platform" not in services["login"]
    assert not any(usr in s.get("volumes", []) for n, s in services.items() if "grace" not in n)
    data = render.render(cluster, secret_files(tmp_path), "sha256:abc")
    assert set(data["volumes"]) >= {"jail", render.usr_volume("arm64")}


def test_a_node_set_that_names_the_cells_own_arch_is_one_of_its_nodes(
    write_cluster, versions, tmp_path: Path
) -> None:
    cluster = loader.load(write_cluster(_mixed("amd64")), versions)
    assert cluster.other_arches == []
    services = render.render(cluster, secret_files(tmp_path), "sha256:abc")["services"]
    assert services["grace-0"]["platform"] == "linux/amd64"
    assert services["grace-0"]["image"] == services["cpu-0"]["image"]
    assert "jail-usr-amd64" not in str(services)


def test_an_arch_the_set_has_no_cell_of_is_refused(write_cluster, tmp_path: Path) -> None:
    path = write_cluster(_mixed(set_name="default", cell=None))
    assert_clean_failure(
        run_invoke("deploy", "--cluster", str(path), "--out", str(tmp_path / "out")),
        f"{path}: nodesets[1].arch: set 'default' has no arm64 cell of Slurm 24.05.8, CUDA "
        "12.2.2 on debian12 (expected amd64, or arm64 in the set's matrix.arch)",
    )
    assert not (tmp_path / "out").exists()


def test_an_unknown_arch_is_refused(write_cluster, versions) -> None:
    with pytest.raises(ConfigError, match=r"nodesets\[1\]\.arch: .*'amd64' or 'arm64'"):
        loader.load(write_cluster(_mixed("riscv64")), versions)


def test_kubernetes_places_each_arch_on_its_nodes_with_its_jail_usr(
    write_cluster, versions, tmp_path: Path
) -> None:
    """k8s: an arm64 node set's pods go to arm64 nodes (kubernetes.io/arch), pull the arm64
    images by their pushed digests, mount the node's aarch64 driver directory, and see the jail
    with the arm64 /usr, which a populate Job of its own copies on an arm64 node first."""
    data = _mixed()
    data["nodesets"][1].update(gres=["gpu:gh200:1"], definitions=["gpu"])
    data["partitions"].append({"name": "train", "nodesets": ["grace"]})
    jail = {"storage_class": "nfs-client", "size": "1Ti"}
    data["kubernetes"] = {"namespace": "hpc", "jail": jail}
    cluster_file = write_cluster(data)
    cluster = loader.load(cluster_file, versions)
    lock = {ref: f"sha256:{i:064x}" for i, ref in enumerate(sorted(cluster.images.values()))}
    (tmp_path / "build").mkdir()
    (tmp_path / state.IMAGES_LOCK).write_text(json.dumps(lock))
    kube = rendered_kube(cluster_file, tmp_path)
    assert kube.manifests.validate() == ["1.29", "1.30", "1.31", "1.32"]
    objects = kube.manifests.objects

    def pod(name: str) -> dict:
        return objects[name]["spec"]["template"]["spec"]

    def arches(spec: dict) -> list:
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        (term,) = terms["nodeSelectorTerms"]
        return [e for e in term["matchExpressions"] if e["key"] == "kubernetes.io/arch"]

    grace, cpu = pod("statefulset-grace.yaml"), pod("statefulset-cpu.yaml")
    assert arches(grace) == [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]
    assert "affinity" not in cpu  # no arch given: wherever the cluster's nodes are
    node = grace["containers"][0]
    worker = cluster.node_image(cluster.nodeset("grace"))
    assert worker.endswith(f"/worker:{CELL}-arm64") and node["image"].endswith(lock[worker])
    assert [v["hostPath"]["path"] for v in grace["volumes"] if "hostPath" in v] == [
        "/usr/lib/aarch64-linux-gnu",
        "/usr/bin",
    ]
    mounts = [(m["name"], m["mountPath"]) for m in node["volumeMounts"]]
    assert mounts.index(("jail", "/jail")) + 1 == mounts.index(("jail-usr-arm64", "/jail/usr"))
    assert not any(m[1] == "/jail/usr" for c in cpu["containers"] for m in
                   [(v["name"], v["mountPath"]) for v in c["volumeMounts"]])  # fmt: skip
    # the pod waits for both populates: the jail's and its arch's /usr
    (wait,) = grace["initContainers"]
    jail_id, usr_id = lock[cluster.images["jail"]], lock[cluster.image("jail", "arm64")]
    script = wait["command"][-1]
    # each as its populate records it: this cluster has no portal, so its notebook servers'
    # environment is left out of both (what the populate Jobs are told, below)
    without = f"without {' '.join(NOTEBOOK_PATHS)}"
    assert f"{jail_id} {without}' /jail/.slurmforge/populated" in script
    assert f"{usr_id} {without}' /jail/usr/.slurmforge/populated" in script
    assert wait["image"].endswith(usr_id)
    claim = objects["pvc-jail-usr-arm64.yaml"]["spec"]
    assert claim["accessModes"] == ["ReadWriteMany"] and claim["storageClassName"] == "nfs-client"
    (job,) = [o for n, o in objects.items() if n.startswith("job-jail-populate-usr-arm64-")]
    spec = job["spec"]["template"]["spec"]
    assert arches(spec)[0]["values"] == ["arm64"]
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["SLURMFORGE_JAIL_SKIP"] == " ".join(NOTEBOOK_PATHS)
    (populate,) = spec["containers"]
    env = {e["name"]: e["value"] for e in populate["env"]}
    assert env["SLURMFORGE_JAIL_PART"] == "usr" and env["SLURMFORGE_JAIL_DIGEST"] == usr_id
    assert [(m["name"], m["mountPath"]) for m in populate["volumeMounts"]] == [
        ("jail-usr-arm64", "/jail")
    ]


def test_an_arm64_cluster_with_amd64_nodes_is_the_mirror_image(
    write_cluster, versions, tmp_path: Path
) -> None:
    """The cell may be the arm64 one (an all-Grace control plane); a node set of amd64 then runs
    the amd64 cell's node image and sees the jail with the amd64 /usr."""
    data = _mixed("amd64", cell=f"{CELL}-arm64")
    cluster = loader.load(write_cluster(data), versions)
    cpu, other = cluster.spec.nodesets
    assert cluster.other_arches == ["amd64"]
    assert cluster.node_image(cpu).endswith(f"/slurmd:{CELL}-arm64")
    assert cluster.node_image(other).endswith(f"/slurmd:{CELL}")
    assert cluster.images["login"].endswith(f"/login:{CELL}-arm64")
    assert cluster.image("jail", "amd64").endswith(f"/jail:{CELL}")
    services = render.render(cluster, secret_files(tmp_path), "sha256:abc")["services"]
    assert f"{render.usr_volume('amd64')}:/jail/usr" in services["grace-0"]["volumes"]
    assert services["grace-0"]["platform"] == "linux/amd64"
    assert not any("/jail/usr" in v for v in services["cpu-0"]["volumes"])
