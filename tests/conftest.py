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


# The selection under test: the `default` set unless `invoke test-images` names another.
TEST_SET = os.environ.get("SLURMFORGE_TEST_SET") or "default"
TEST_CELLS = tuple(c for c in os.environ.get("SLURMFORGE_TEST_CELLS", "").split(",") if c)
TEST_CONFIG = Path(os.environ.get("SLURMFORGE_TEST_CONFIG") or ROOT / "versions.yaml")


@pytest.fixture(scope="session")
def project() -> Project:
    project = Project(Selection(TEST_CONFIG, TEST_SET, TEST_CELLS))
    if len(project.cells) != 1:
        names = ", ".join(c.name for c in project.cells)
        pytest.exit(f"set {TEST_SET!r} has several cells ({names}); pick one", returncode=2)
    return project


@pytest.fixture(scope="session")
def images(project: Project) -> dict[str, str]:
    """component → image reference, after `invoke build` of the selection succeeded."""
    argv = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build"]
    argv += ["--set", TEST_SET, "--config", str(TEST_CONFIG)]
    argv += [w for c in TEST_CELLS for w in ("--cell", c)]
    proc = subprocess.run(argv, cwd=ROOT, env={**os.environ, "SLURMFORGE_DEBUG": ""}, timeout=3600)
    assert proc.returncode == 0, f"{' '.join(argv[3:])} failed (see .cache/logs/latest)"
    return {t.component: t.ref for t in project.targets}


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    return docker.from_env()


def docker_images(client: docker.DockerClient) -> set[str]:
    """IDs of every image the daemon holds, to prove that an operation tagged nothing."""
    return {i.id for i in client.images.list(all=True)}
