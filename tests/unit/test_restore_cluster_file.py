"""A backup's own cluster file: what lets `invoke restore --archive A` run on a host that has
nothing of the cluster. The archive holds the cluster file as it was, and one that needs nothing
else (its node sets' layers applied, the node counts the cluster ran with, the directory's seed
beside it); a restore given no --cluster writes that one into the cluster's state directory and
takes it, and refuses to replace a different file there or to write outside it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from slurmforge.config import Config
from slurmforge.deploy import loader
from slurmforge.deploy.backup import archive, pod, restoring, snapshot, take
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.common import ROOT, load_yaml
from tests.unit.helpers import shipped_with

SEED = (
    "dn: dc=example,dc=org\nobjectClass: dcObject\nobjectClass: organization\no: E\ndc: example\n"
)


@pytest.fixture
def versions() -> Config:
    return load_versions(ROOT / "versions.yaml")


def _directory_cluster(write_cluster, tmp_path: Path, versions: Config):
    """The shipped cluster (node sets from layers) with an embedded directory whose seed sits
    in a folder of its own, scaled to 3 nodes as `invoke scale` keeps it."""
    (tmp_path / "ldap").mkdir()
    (tmp_path / "ldap" / "seed.ldif").write_text(SEED)
    ldap = {"embedded": True, "base_dn": "dc=example,dc=org", "seed": "ldap/seed.ldif"}
    path = write_cluster(shipped_with(identity={"source": "ldap", "ldap": ldap}))
    return loader.load(path, versions, {"cpu": 3})


def _archive(cluster, out: Path) -> Path:
    """An archive of ``cluster`` as a backup writes it (nothing running: no database, state or
    jail to copy, and the directory's entries left to the cluster tier, which runs slapd)."""
    plan = take.plan(cluster, "25.11.7")
    plan.directory = False
    plan.secrets, plan.database, plan.jail = {}, None, ["job_state"]
    plan.state_dir = plan.jail_root = str(out)
    out.mkdir(exist_ok=True)
    (out / "job_state").write_bytes(b"")
    later = time.time() + 3600  # a save newer than the (absent) dump: no wait for the next one
    os.utime(out / "job_state", (later, later))
    path, _ = snapshot.Snapshot(plan, pod.PodSource(None, "slurm", None), out).run()
    return path


def test_the_archive_holds_a_cluster_file_that_needs_nothing_else(
    write_cluster, tmp_path: Path, versions: Config
) -> None:
    cluster = _directory_cluster(write_cluster, tmp_path, versions)
    plan = take.plan(cluster, "25.11.7")
    assert plan.directory  # its entries are copied (slapcat)
    assert plan.files["cluster.yaml"] == cluster.path.read_text()  # as it was, too
    assert plan.files["seed.ldif"] == SEED
    alone = load_yaml(plan.files[plan.standalone])
    assert "definitions" not in alone["nodesets"][0] and "layers" not in alone
    assert alone["identity"]["ldap"]["seed"] == "seed.ldif"
    # written by itself beside its seed, it is the same cluster, at the kept node count
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "c.yaml").write_text(plan.files[plan.standalone])
    (elsewhere / "seed.ldif").write_text(SEED)
    again = loader.load(elsewhere / "c.yaml", versions)
    want = cluster.spec.model_dump()
    want["identity"]["ldap"]["seed"] = "seed.ldif"
    assert again.spec.model_dump() == want
    assert [ns.replicas for ns in again.spec.nodesets] == [3]


def test_a_restore_given_no_cluster_file_writes_the_archives_into_the_state_directory(
    write_cluster, tmp_path: Path, versions: Config
) -> None:
    cluster = _directory_cluster(write_cluster, tmp_path, versions)
    path = _archive(cluster, tmp_path / "backups")
    written = restoring.unpack_cluster(path)
    assert written == tmp_path / "state" / cluster.name / "cluster" / f"{cluster.name}.yaml"
    seed = written.parent / "seed.ldif"
    assert seed.read_text() == SEED
    for file in (written, seed):  # a seed may hold password hashes
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(written.parent.parent.stat().st_mode) == 0o700
    assert loader.load(written, versions).spec.nodesets[0].replicas == 3
    assert restoring.unpack_cluster(path) == written  # again: the same files, nothing refused
    # one that was changed since is the user's now: refused, not replaced
    written.write_text(written.read_text() + "# mine\n")
    with pytest.raises(ConfigError, match=r"differs from the cluster file in") as err:
        restoring.unpack_cluster(path)
    assert err.value.hint and f"--cluster {written}" in err.value.hint
    assert written.read_text().endswith("# mine\n")


def _crafted(directory: Path, cluster: str, files: dict[str, str], standalone: str | None) -> Path:
    """An archive with a correct manifest and checksums whose contents say what they like."""
    manifest = archive.Manifest(cluster, "2026-01-01T00:00:00+00:00", "25.11.7", "0", {})
    manifest.standalone = standalone
    with archive.Writer(directory, "a.tar", manifest) as writer:
        for name, text in files.items():
            writer.add_bytes(name, text.encode())
        return writer.commit()


@pytest.mark.parametrize(
    ("cluster", "files", "expected"),
    [
        # the cluster file names a seed outside the archive's cluster/ folder
        ("train", {"cluster/t.yaml": "name: train\nidentity: {ldap: {seed: ../../../x.ldif}}\n"},
         r"names 'cluster/\.\./\.\./\.\./x\.ldif'"),
        # a cluster name no cluster file allows (it names the state directory's folder)
        ("../up", {"cluster/t.yaml": "name: up\n"}, r"names cluster '\.\./up'"),
        # a cluster file that is no YAML mapping, or not YAML at all
        ("train", {"cluster/t.yaml": "- a\n- b\n"}, r"cluster/t\.yaml is not a cluster file"),
        ("train", {"cluster/t.yaml": "a: [\n"}, r"cluster/t\.yaml is not a cluster file"),
    ],
)  # fmt: skip
def test_an_archive_that_would_write_outside_the_state_directory_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: str, files: dict, expected: str
) -> None:
    monkeypatch.setenv("SLURMFORGE_STATE_DIR", str(tmp_path / "state"))
    path = _crafted(tmp_path, cluster, files, "cluster/t.yaml")
    with pytest.raises(ConfigError, match=expected):
        restoring.unpack_cluster(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar"]


def test_an_older_archive_without_one_is_refused_with_how_to_restore_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURMFORGE_STATE_DIR", str(tmp_path / "state"))
    path = _crafted(tmp_path, "train", {"cluster/cluster.yaml": "name: train\n"}, None)
    with pytest.raises(ConfigError, match="holds no cluster file a restore can use alone") as err:
        restoring.unpack_cluster(path)
    want = f"extract cluster/ from it (tar -xf {path} cluster/) and give --cluster"
    assert err.value.hint == want
