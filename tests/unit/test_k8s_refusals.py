"""What the k8s target refuses, in one line before anything is written or applied: bad
kubernetes settings, a GPU node set without a GPU image, images neither pushed nor built,
commands it cannot carry out."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge.deploy import loader
from slurmforge.deploy.commands import open_target
from slurmforge.deploy.k8s.run import Kube
from slurmforge.deploy.target import Where
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.unit.helpers import assert_clean_failure, run_invoke
from tests.unit.kube import cluster_data


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
    path = write_cluster(cluster_data(**kubernetes))
    versions = Path(__file__).resolve().parents[2] / "versions.yaml"
    with pytest.raises(ConfigError) as exc:
        open_target(Where(path, versions, tmp_path / "out", "k8s"))
    assert f"{path}: {expected}" in exc.value.message


def test_bad_kubernetes_settings_through_the_cli(write_cluster) -> None:
    path = write_cluster(cluster_data(versions=["1.31", "1.99"]))
    proc = run_invoke("deploy", "--target", "k8s", "--dry-run", "--cluster", str(path))
    assert_clean_failure(proc, f"{path}: kubernetes.versions[1]: no schemas for Kubernetes 1.99")


def test_gpu_node_set_without_a_gpu_image_is_refused_for_every_target(write_cluster) -> None:
    data = cluster_data()
    data["nodesets"][1]["image"] = "slurmd"
    path = write_cluster(data)
    for target in ("k8s", "local"):
        proc = run_invoke("deploy", "--target", target, "--cluster", str(path))
        assert_clean_failure(
            proc,
            f"{path}: nodesets[1].image: node set 'a100' requests GPUs (gpu:1, gpu:a100:4) "
            "but 'slurmd' has no GPU user space; expected worker",
        )


def test_images_neither_pushed_nor_built(write_cluster, tmp_path) -> None:
    versions = load_versions(Path(__file__).resolve().parents[2] / "versions.yaml")
    cluster = loader.load(write_cluster(cluster_data()), versions)
    with pytest.raises(ConfigError, match=r"\(jail\) is neither pushed nor built"):
        Kube(cluster, tmp_path / "out", tmp_path).manifests.write()


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
    proc = run_invoke(*args, "--cluster", str(cluster_file), "--out", str(root / "out"))
    assert_clean_failure(proc, expected)
    assert not (root / "out").exists()  # nothing rendered, nothing applied


@pytest.mark.parametrize(
    ("kubernetes", "args", "said"),
    [
        ({}, ["--namespace", "kube-system"], "--namespace 'kube-system'"),
        ({"namespace": "default"}, [], "{path}: kubernetes.namespace 'default'"),
        ({"namespace": None}, [], "{path}: name (the namespace unless kubernetes.namespace is"),
    ],
)
def test_a_namespace_of_kubernetes_own_is_refused(
    write_cluster, tmp_path: Path, kubernetes: dict, args: list[str], said: str
) -> None:
    """deploy writes the cluster's Namespace (its labels, its pod-security level) and the tasks'
    hint removes it with the rest: never kube-system's, default's or another kube-*."""
    data = cluster_data(**kubernetes)
    if kubernetes.get("namespace", "") is None:
        data["name"] = "kube-slurm"
        del data["kubernetes"]["namespace"]
    path = write_cluster(data)
    out = tmp_path / "out"
    line = ["deploy", "--target", "k8s", "--dry-run", "--cluster", str(path), "--out", str(out)]
    proc = run_invoke(*line, *args)
    assert_clean_failure(proc, said.format(path=path))
    assert "Kubernetes' own namespaces" in proc.stderr
    assert not out.exists()
