"""Image tier: testinfra on containers of the `default` set's images (built on demand)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import testinfra

ROLES = ("slurmctld", "slurmd", "worker", "login", "jail")


@pytest.fixture(scope="session")
def hosts(images: dict[str, str], client: docker.DockerClient) -> Iterator[dict[str, object]]:
    """A running container per role (entrypoint bypassed: nothing but the image's files)."""
    containers = {
        role: client.containers.run(
            images[role],
            entrypoint=["sleep", "infinity"],
            detach=True,
            auto_remove=False,
            labels={"io.slurmforge.test": "image"},
        )
        for role in ROLES
    }
    try:
        yield {role: testinfra.get_host(f"docker://{c.id}") for role, c in containers.items()}
    finally:
        for c in containers.values():
            c.remove(force=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.image)
