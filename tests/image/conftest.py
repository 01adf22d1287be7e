"""Image tier: testinfra on containers of each mission cell's images (built on demand): README's
cell of the `ci` set (Slurm 24.05) and one cell of the `current` set (tests/image/cells.py), or
the set and cells `invoke test-images` names (`--set ci`: Slurm 23.11 too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import testinfra

from slurmforge import state
from slurmforge.app import Project
from tests.common import ROOT, build, select
from tests.image.cells import IMAGE_CELLS, ROLES, cell_of
from tests.image.helpers import layer_files


@pytest.fixture(scope="session", params=IMAGE_CELLS, ids=[cell for _, cell in IMAGE_CELLS])
def project(request: pytest.FixtureRequest) -> Project:
    """One cell at a time: the whole tier runs against one cell's images, then the next."""
    set_name, cell = request.param
    return select(set_name, (cell,))


@pytest.fixture(scope="session")
def images(project: Project) -> dict[str, str]:
    return build(project)


# Not a Slurm role: the accounting database (its own tests in test_accounting_images.py)
DATABASE = "mariadb"


@pytest.fixture(scope="session")
def layers(images: dict[str, str], client: docker.DockerClient) -> dict[str, set[str]]:
    """Every path in every layer of each role's image and the database's, read once a cell."""
    refs = {role: images[role] for role in (*ROLES, DATABASE)}
    files = layer_files(client, refs.values())
    return {role: files[ref] for role, ref in refs.items()}


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
        for role in (*ROLES, DATABASE)
    }
    try:
        yield {role: testinfra.get_host(f"docker://{c.id}") for role, c in containers.items()}
    finally:
        for c in containers.values():
            c.remove(force=True)


HERE = Path(__file__).parent
# What `invoke push` trusts: recorded only when every image test was collected, ran and passed.
_tier = {"collected": 0, "passed": 0, "failed": 0}
_tested: dict[str, str] = {}  # image id → ref, of the images the tier ran against


def _in_tier(path: str | Path) -> bool:
    return HERE in Path(path).resolve().parents


def _distro(cell: str) -> str:
    return cell.rsplit("-", 1)[-1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test marked once_per_distro checks what the cells of one distro share (populate's
    # behaviour: the jail image's entrypoint and rsync, the same in each; the cells differ in
    # Slurm and CUDA): it runs on the tier's first cell of each distro. Run on the three
    # cells, those tests took about 6 minutes of the k8s lane, a fresh run's longest.
    first: dict[str, str] = {}
    for _, cell in IMAGE_CELLS:
        first.setdefault(_distro(cell), cell)
    dropped = set()
    for item in items:
        if not _in_tier(item.fspath):
            continue
        cell = cell_of(item)
        if item.get_closest_marker("once_per_distro") and cell and first[_distro(cell)] != cell:
            dropped.add(item.nodeid)
            continue
        item.add_marker(pytest.mark.image)
        _tier["collected"] += 1
    if dropped:
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in dropped])
        items[:] = [i for i in items if i.nodeid not in dropped]


@pytest.fixture(scope="session", autouse=True)
def _remember_tested(request: pytest.FixtureRequest, project: Project) -> None:
    """The IDs of the selection's public images, as the tests see them."""
    if not any(_in_tier(item.fspath) for item in request.session.items):
        return
    request.getfixturevalue("images")  # built (or found) first
    for target in project.publishable():
        info = project.engine.inspect(target.ref)
        if info is not None:
            _tested[info.id] = target.ref


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _in_tier(ROOT / report.fspath):
        return
    if report.failed:
        _tier["failed"] += 1
    elif report.when == "call" and report.passed:
        _tier["passed"] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    opts = session.config.option
    narrowed = opts.keyword or opts.markexpr or opts.deselect or getattr(opts, "lf", False)
    complete = _tier["collected"] and _tier["passed"] == _tier["collected"]
    if _tested and complete and not _tier["failed"] and not narrowed:
        state.record_tested(ROOT, _tested.items(), "tests/image")
