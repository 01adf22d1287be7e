"""Push tier, two arches: the default cell built for amd64 and arm64 (the arm64 half as the
build tier builds it: Slurm cross-compiled, the rest under emulation), pushed to a real
registry: each published tag is one manifest list of both images, made by a push of the whole
set or, after a push per cell (as CI runs them, each on its own machine), by `push --lists` from
the registry alone; each arch pulled through it is that arch, the lock holds the list's and each
arch's digest, and a list that names another image than the one pushed is refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bench.common import copy_project
from slurmforge import manifest_list, state
from slurmforge.app import Project, Selection
from tests.build.helpers import CELL, run_build, with_arm64
from tests.local_registry import registry
from tests.registry.helpers import invoke, manifest, record_tested

# public; its arm64 build is the grace set's, which the prebuild makes before this runs
# (tests/order.py), relabelled for this cell in seconds (mariadb's took minutes under emulation)
COMPONENT = "slurmd"
LIST_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"


def test_a_tag_of_two_arches_is_one_manifest_list_of_both(tmp_path: Path, images, client) -> None:
    # a lock of its own: the relabel is a build (not a tag), and behind the checkout's lock it
    # waited out the prebuild's compile of Slurm 25.11 (about 8 of its 9.3 minutes in a fresh
    # run), with the main lane's last tests behind it; nothing else builds this cell's arm64
    # slurmd, and what it is made from (the grace set's) the mixed-arch module waited for
    root = copy_project(tmp_path / "project")
    with_arm64(root)
    built = run_build(root, "--set", "default", "--cell", f"{CELL}-arm64", "--component", COMPONENT)
    assert built.returncode == 0, built.stdout + built.stderr
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(root / "versions.yaml", work / "versions.yaml")
    project = Project(Selection(work / "versions.yaml", "default", (), (COMPONENT,)))
    targets = {t.arch: t for t in project.publishable()}
    assert sorted(targets) == ["amd64", "arm64"]
    record_tested(work, client, [t.ref for t in targets.values()])
    with registry(tmp_path / "registry") as host:
        tag = f"{host}/sf/{COMPONENT}:{CELL}"
        # one arch's cell alone (as a CI job per cell pushes): its own tags, no list that would
        # leave the other arch out
        one = ("--component", COMPONENT, "--registry", f"{host}/sf", "--cell", f"{CELL}-arm64")
        proc = invoke(work, *one)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{tag}: no manifest list made: this push has no amd64 image" in proc.stderr
        assert sorted(json.loads((work / state.IMAGES_LOCK).read_text())) == sorted(
            [f"{tag}-arm64", f"{tag.replace(CELL, '24.05-cuda12.2.2-debian12')}-arm64"]
        )
        with pytest.raises(urllib.error.HTTPError, match="404"):
            _manifest(host, f"sf/{COMPONENT}", CELL, LIST_TYPE)
        # what CI runs after its job per cell: lists from what those pushes left in the
        # registry; with amd64's not pushed yet, refused before any list is made
        lists = ("--component", COMPONENT, "--registry", f"{host}/sf", "--lists")
        proc = invoke(work, *lists)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"error: {tag}-amd64 is not in the registry" in proc.stderr, proc.stderr
        with pytest.raises(urllib.error.HTTPError, match="404"):
            _manifest(host, f"sf/{COMPONENT}", CELL, LIST_TYPE)
        proc = invoke(work, *one[:-1], CELL)  # the amd64 cell's own job
        assert proc.returncode == 0, proc.stdout + proc.stderr
        proc = invoke(work, *lists)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lock = json.loads((work / state.IMAGES_LOCK).read_text())
        manifest_list.check(tag, {arch: lock[f"{tag}-{arch}"] for arch in targets})
        _, body = _manifest(host, f"sf/{COMPONENT}", CELL, LIST_TYPE)
        assert len(body["manifests"]) == 2
        # the whole set: each tag one list of both
        proc = invoke(work, "--component", COMPONENT, "--registry", f"{host}/sf")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lock = json.loads((work / state.IMAGES_LOCK).read_text())
        per_arch = {arch: lock[f"{tag}-{arch}"] for arch in targets}
        # the registry serves one list at the tag, naming each arch's image by its digest
        req_types = f"{LIST_TYPE}, application/vnd.oci.image.index.v1+json"
        served, body = _manifest(host, f"sf/{COMPONENT}", CELL, req_types)
        assert served == lock[tag] and body["mediaType"] == LIST_TYPE
        assert {m["platform"]["architecture"]: m["digest"] for m in body["manifests"]} == per_arch
        # each arch's digest is that arch's image, as built here
        for arch, target in targets.items():
            _, image = manifest(host, f"sf/{COMPONENT}", per_arch[arch])
            assert image["config"]["digest"] == client.images.get(target.ref).id, arch
        # pulled through the list, each platform gets its own arch
        ref = f"{tag.rsplit(':', 1)[0]}@{lock[tag]}"
        for arch in targets:
            argv = ["docker", "pull", "--platform", f"linux/{arch}", ref]
            pulled = subprocess.run(argv, capture_output=True, text=True)
            assert pulled.returncode == 0, pulled.stderr
            assert client.images.get(ref).attrs["Architecture"] == arch
            client.images.remove(ref, force=True)
        # a list that names another image for an arch than the one pushed is refused
        manifest_list.check(tag, per_arch)
        tampered = {**per_arch, "arm64": per_arch["amd64"]}
        other = r"arm64: sha256:\w+ \(pushed sha256:"
        with pytest.raises(manifest_list.ManifestListError, match=other):
            manifest_list.check(tag, tampered)
        # the registry's list replaced by one of amd64 alone: the arm64 image is missing
        manifest_list.publish(tag, {"amd64": per_arch["amd64"]})
        with pytest.raises(manifest_list.ManifestListError, match="arm64: missing"):
            manifest_list.check(tag, per_arch)


def test_a_missing_arch_is_refused_before_anything_is_pushed(tmp_path: Path, images) -> None:
    work = tmp_path / "work"
    root = copy_project(tmp_path / "project", share_build_lock=True)
    with_arm64(root)
    work.mkdir()
    shutil.copy(root / "versions.yaml", work / "versions.yaml")
    with registry(tmp_path / "registry") as host:
        proc = invoke(work, "--component", "slurmctld", "--registry", f"{host}/sf", "--force")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        first = proc.stderr.splitlines()[0]
        assert first.startswith("error: not built: ") and f"slurmctld:{CELL}-arm64" in first
        assert "nothing was pushed" in first
        assert _catalog(host) == []


def _manifest(host: str, repo: str, reference: str, accept: str) -> tuple[str, dict]:
    req = urllib.request.Request(f"http://{host}/v2/{repo}/manifests/{reference}")
    req.add_header("Accept", accept)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["Docker-Content-Digest"], json.loads(resp.read())


def _catalog(host: str) -> list[str]:
    from tests.registry.helpers import catalog

    return catalog(host)
