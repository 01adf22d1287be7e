"""Fixtures shared by the unit tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT


@pytest.fixture
def write_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a cluster file next to a copy of the shipped layers; state goes to tmp_path."""
    shutil.copytree(ROOT / "deploy" / "layers", tmp_path / "layers")
    monkeypatch.setenv("SLURMFORGE_STATE_DIR", str(tmp_path / "state"))

    def write(data: dict) -> Path:
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write
