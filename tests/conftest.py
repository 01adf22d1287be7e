"""Fixtures every tier may ask for: the shipped versions.yaml as data, a versions file written
for a test, the selection under test and its built images, and the Docker client. What the tiers
share besides fixtures is in common.py."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path

import docker
import pytest

from slurmforge.app import Project
from tests.common import ROOT, TEST_CELLS, TEST_SET, build, dump_yaml, load_yaml, select


@functools.cache
def _shipped_pickled() -> bytes:
    return pickle.dumps(load_yaml((ROOT / "versions.yaml").read_text()))


@pytest.fixture
def shipped() -> dict:
    """The shipped versions.yaml as plain data, for tests to mutate (a copy of their own: read
    once a session, which a hundred tests ask for)."""
    return pickle.loads(_shipped_pickled())


@pytest.fixture
def write_config(tmp_path: Path):
    """Write data as versions.yaml into a temporary project (with a copy of images/)."""

    def write(data: dict, text: str | None = None) -> Path:
        path = tmp_path / "versions.yaml"
        path.write_text(text if text is not None else dump_yaml(data, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def project() -> Project:
    project = select(TEST_SET, TEST_CELLS)
    if len(project.cells) != 1:
        names = ", ".join(c.name for c in project.cells)
        pytest.exit(f"set {TEST_SET!r} has several cells ({names}); pick one", returncode=2)
    return project


@pytest.fixture(scope="session")
def images(project: Project) -> dict[str, str]:
    return build(project)


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    # the engine answers slowly while the prebuild compiles beside the tiers: a fresh CI run's
    # node-loss test had a container listing time out at the SDK's default 60 s
    return docker.from_env(timeout=300)
