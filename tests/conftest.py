from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest
import yaml

from slurmforge.app import Project, Selection

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def shipped() -> dict:
    """The shipped versions.yaml as plain data, for tests to mutate."""
    return yaml.safe_load((ROOT / "versions.yaml").read_text())


@pytest.fixture
def write_config(tmp_path: Path):
    """Write data as versions.yaml into a temporary project (with a copy of images/)."""

    def write(data: dict, text: str | None = None) -> Path:
        path = tmp_path / "versions.yaml"
        path.write_text(text if text is not None else yaml.safe_dump(data, sort_keys=False))
        return path

    return write


# -- Docker tiers (image, cluster): the images of the `default` set, built through `invoke build`.
# The first run compiles Slurm (several minutes); later runs find every target cached.


@pytest.fixture(scope="session")
def project() -> Project:
    return Project(Selection(ROOT / "versions.yaml", "default"))


@pytest.fixture(scope="session")
def images(project: Project) -> dict[str, str]:
    """component → image reference, after `invoke build --set default` succeeded."""
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build", "--set", "default"],
        cwd=ROOT,
        env={**os.environ, "SLURMFORGE_DEBUG": ""},
        timeout=3600,
    )
    assert proc.returncode == 0, "invoke build --set default failed (see .cache/logs/latest)"
    return {t.component: t.ref for t in project.targets}


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    return docker.from_env()


def docker_images(client: docker.DockerClient) -> set[str]:
    """IDs of every image the daemon holds, to prove that an operation tagged nothing."""
    return {i.id for i in client.images.list(all=True)}
