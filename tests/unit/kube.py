"""The k8s target as the unit tests drive it: a cluster of two node sets rendered by a real `Kube`
whose kubectl calls a test may answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurmforge import state
from slurmforge.deploy import loader
from slurmforge.deploy.k8s.run import Kube
from slurmforge.versions import load as load_versions
from tests.unit.helpers import shipped_with

ROOT = Path(__file__).resolve().parents[2]
POD_OWNERS = {"StatefulSet", "Deployment", "Job"}


def cluster_data(**kubernetes: Any) -> dict:
    return shipped_with(
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


def with_images_lock(cluster_file: Path, root: Path) -> Path:
    """``root`` made checkout-like for ``cluster_file``: a build directory and a push lock for
    every image the cluster runs."""
    cluster = loader.load(cluster_file, load_versions(ROOT / "versions.yaml"))
    lock = {ref: f"sha256:{i:064x}" for i, ref in enumerate(sorted(cluster.images.values()))}
    (root / "build").mkdir(exist_ok=True)
    (root / state.IMAGES_LOCK).write_text(json.dumps(lock))
    return root


def rendered_kube(cluster_file: Path, root: Path, run=None, **kw: Any) -> Kube:
    cluster = loader.load(cluster_file, load_versions(ROOT / "versions.yaml"))
    if run is not None:
        kw["run"] = run
    kube = Kube(cluster, root / "out", root, None, **kw)
    kube.manifests.write()
    return kube


def pod_of(obj: dict) -> dict | None:
    if obj["kind"] in POD_OWNERS:
        return obj["spec"]["template"]["spec"]
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def containers_of(obj: dict) -> list[dict]:
    """Every container of a workload's pod, init containers first."""
    pod = pod_of(obj)
    return [*pod.get("initContainers", []), *pod["containers"]] if pod else []
