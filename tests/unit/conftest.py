"""Fixtures shared by the unit tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.common import ROOT, dump_yaml
from tests.unit.kube import cluster_data, with_images_lock


@pytest.fixture
def write_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a cluster file next to a copy of the shipped layers; state goes to tmp_path."""
    shutil.copytree(ROOT / "deploy" / "layers", tmp_path / "layers")
    monkeypatch.setenv("SLURMFORGE_STATE_DIR", str(tmp_path / "state"))

    def write(data: dict) -> Path:
        path = tmp_path / "cluster.yaml"
        path.write_text(dump_yaml(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def checkout(tmp_path: Path, write_cluster) -> tuple[Path, Path]:
    """A checkout-like dir: versions.yaml, a cluster file and a push lock for every image."""
    cluster_file = write_cluster(cluster_data())
    return cluster_file, with_images_lock(cluster_file, tmp_path)
