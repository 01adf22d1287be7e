"""Push tier: `invoke push` of the default cell's images to a real registry (Debian's
docker-registry, distribution v2, on 127.0.0.1 with storage in a temporary directory).

Each test works in a project directory of its own (a copy of versions.yaml), so the record of
tested images and the lock file it writes are its own; the images are the real, built ones.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from slurmforge import push, state
from slurmforge.app import Project, Selection
from tests.common import ROOT, dump_yaml
from tests.local_registry import DroppingProxy, free_port, registry
from tests.registry.helpers import catalog, invoke, manifest, record_tested

COMPONENT = "slurmctld"


@pytest.fixture
def workdir(tmp_path: Path, images: dict[str, str]) -> Path:
    """A project dir whose versions.yaml is the shipped one, with the component recorded tested."""
    work = tmp_path / "project"
    work.mkdir()
    shutil.copy(ROOT / "versions.yaml", work / "versions.yaml")
    return work


def test_push_records_digests_that_pull_back_as_the_same_image(
    workdir, images, client, tmp_path
) -> None:
    local = client.images.get(images[COMPONENT])
    record_tested(workdir, client, [images[COMPONENT]])
    with registry(tmp_path / "registry") as host:
        proc = invoke(workdir, "--component", COMPONENT, "--registry", f"{host}/sf")
        assert proc.returncode == 0, proc.stderr
        lock = json.loads((workdir / state.IMAGES_LOCK).read_text())
        project = Project(Selection(workdir / "versions.yaml", "default", (), (COMPONENT,)))
        (target,) = project.publishable()
        old = project.config.versions.sets["default"].registry
        expected = [push.retarget(t, old, f"{host}/sf") for t in target.tags]
        # every tag (versioned and floating) is in the lock, and nothing else
        assert sorted(lock) == sorted(expected) and len(expected) == 2
        for ref in expected:
            repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
            served, body = manifest(host, repo, tag)
            assert lock[ref] == served  # the digest the registry serves for the tag
            assert body["config"]["digest"] == local.id  # and it is this image
        # the tags made for the push are gone again; the set's own tags stay
        tags = client.images.get(images[COMPONENT]).tags
        assert images[COMPONENT] in tags and not [t for t in tags if t.startswith(host)]
        pulled = client.images.pull(f"{expected[0].rsplit(':', 1)[0]}@{lock[expected[0]]}")
        assert pulled.id == local.id


def test_re_push_of_unchanged_images_sends_nothing(workdir, images, client, tmp_path) -> None:
    record_tested(workdir, client, [images[COMPONENT]])
    with registry(tmp_path / "registry") as host:
        first = invoke(workdir, "--component", COMPONENT, "--registry", host)
        assert first.returncode == 0, first.stderr
        lock = (workdir / state.IMAGES_LOCK).read_text()
        again = invoke(workdir, "--component", COMPONENT, "--registry", host)
        assert again.returncode == 0, again.stderr
        rows = [line.split() for line in again.stdout.splitlines()[2:]]
        assert rows and all(r[2] == "0.0" and int(r[4]) > 0 for r in rows), again.stdout
        assert (workdir / state.IMAGES_LOCK).read_text() == lock


def test_push_survives_a_proxy_that_drops_the_first_connections(
    workdir, images, client, tmp_path
) -> None:
    record_tested(workdir, client, [images[COMPONENT]])
    with registry(tmp_path / "registry") as host:
        proxy = DroppingProxy(host, drop=3)
        try:
            proc = invoke(workdir, "--component", COMPONENT, "--registry", proxy.host)
        finally:
            proxy.close()
        assert proc.returncode == 0, proc.stderr
        assert proxy.dropped == 3 and proxy.served > 0
        assert "retry 1/4" in proc.stderr
        tries = [int(line.split()[5]) for line in proc.stdout.splitlines()[2:]]
        assert tries[0] > 1, proc.stdout
        lock = json.loads((workdir / state.IMAGES_LOCK).read_text())
        ref = next(iter(lock))
        repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
        assert manifest(host, repo, tag)[0] == lock[ref]


def test_registry_with_basic_auth(workdir, images, client, tmp_path) -> None:
    import base64

    record_tested(workdir, client, [images[COMPONENT]])
    secret = "s3cret-not-for-logs"
    with registry(tmp_path / "registry", users={"forge": secret}) as host:
        empty = tmp_path / "no-creds"
        empty.mkdir()
        refused = invoke(
            workdir, "--component", COMPONENT, "--registry", host, env={"DOCKER_CONFIG": str(empty)}
        )
        assert refused.returncode == 2, refused.stderr
        errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "authentication failed" in errors[0] and host in errors[0]
        assert "no credentials" in errors[0] and f"docker login {host}" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert not (workdir / state.IMAGES_LOCK).exists()

        creds = tmp_path / "creds"
        creds.mkdir()
        auth = base64.b64encode(f"forge:{secret}".encode()).decode()
        (creds / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
        ok = invoke(
            workdir, "--component", COMPONENT, "--registry", host, env={"DOCKER_CONFIG": str(creds)}
        )
        assert ok.returncode == 0, ok.stderr
        assert secret not in ok.stdout + ok.stderr and auth not in ok.stdout + ok.stderr
        lock = json.loads((workdir / state.IMAGES_LOCK).read_text())
        ref = next(iter(lock))
        repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
        assert manifest(host, repo, tag, auth)[0] == lock[ref]


def test_untested_images_are_refused_unless_forced(workdir, images, tmp_path) -> None:
    with registry(tmp_path / "registry") as host:
        refused = invoke(workdir, "--component", COMPONENT, "--registry", host)
        assert refused.returncode == 2
        assert "image tests have not passed" in refused.stderr
        assert "invoke test-images --set default" in refused.stderr
        assert catalog(host) == [] and not (workdir / state.IMAGES_LOCK).exists()
        forced = invoke(workdir, "--component", COMPONENT, "--registry", host, "--force")
        assert forced.returncode == 0, forced.stderr
        assert catalog(host) == [f"{COMPONENT}"]


def test_unreachable_registry(workdir, images, client) -> None:
    record_tested(workdir, client, [images[COMPONENT]])
    host = f"127.0.0.1:{free_port()}"
    proc = invoke(workdir, "--component", COMPONENT, "--registry", host, "--retries", "1")
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"registry {host} is unreachable (2 attempts)" in errors[0]
    assert "Traceback" not in proc.stderr and not (workdir / state.IMAGES_LOCK).exists()


def test_pushing_a_cell_that_was_not_built(workdir, images, tmp_path, shipped) -> None:

    shipped["sets"]["default"]["matrix"]["slurm"] = ["24.05.8", "24.11.5"]
    (workdir / "versions.yaml").write_text(dump_yaml(shipped, sort_keys=False))
    cell = "24.11.5-cuda12.2.2-debian12"
    with registry(tmp_path / "registry") as host:
        proc = invoke(workdir, "--registry", host, "--cell", cell)
        assert proc.returncode == 2
        assert "error: not built: " in proc.stderr
        assert f"127.0.0.1:5000/slurmforge/slurmctld:{cell}" in proc.stderr
        assert f"run: invoke build --set default --cell {cell}" in proc.stderr
        assert catalog(host) == []


def test_bad_registry_value(workdir, images) -> None:
    proc = invoke(workdir, "--registry", "Not A Registry")
    assert proc.returncode == 2
    assert (
        "error: --registry: expected a registry prefix HOST[:PORT][/PATH], got 'Not A Registry'"
        in proc.stderr
    )
    assert "Traceback" not in proc.stderr
