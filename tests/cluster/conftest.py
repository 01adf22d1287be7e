"""Cluster tier: a whole cluster deployed with `invoke deploy` (target local) from the built
images, into its own Compose project, state directory and manifest directory (deployed.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker
import pytest

from tests.browser import browser, browsers  # noqa: F401 (the portal tests' fixtures)
from tests.cluster.deployed import Clusters, Deployed


@pytest.fixture(scope="module")
def clusters(
    client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Clusters]:
    """Clusters a module's tests share, removed after its last test."""
    with contextlib.ExitStack() as stack:
        yield Clusters(client, tmp_path_factory, stack)


@pytest.fixture(scope="session")
def deployed(
    images: dict[str, str], client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployed]:
    """The default cluster, shared by the whole tier's session."""
    with contextlib.ExitStack() as stack:
        yield Clusters(client, tmp_path_factory, stack).deploy("sftest")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each phase's report on the test (item.rep_call, ...): fixtures that keep artifacts of a
    failed test read it (test_portal.py's browser)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
