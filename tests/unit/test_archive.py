"""The backup archive's format: what verify accepts is exactly what a finished Writer wrote."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurmforge.deploy.backup import archive
from slurmforge.errors import ConfigError

MEMBERS = {"cluster/cluster.yaml": b"name: c\n", "secrets/munge.key": b"k" * 700, "empty": b""}


def _write(directory: Path) -> Path:
    manifest = archive.Manifest("c", "2026-11-25T00:00:00+00:00", "24.05.8", "0.1.0", {})
    with archive.Writer(directory, "slurmforge-c-1.tar", manifest) as writer:
        for name, data in MEMBERS.items():
            writer.add(name, [data[:100], data[100:]])
        return writer.commit()


def test_a_finished_archive_is_private_readable_by_tar_and_verified(tmp_path: Path) -> None:
    path = _write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert path.stat().st_mode & 0o777 == 0o600
    listing = subprocess.run(["tar", "-tf", str(path)], capture_output=True, text=True, check=True)
    assert listing.stdout.split() == [*MEMBERS, archive.MANIFEST, archive.MANIFEST_SUM]
    # the manifest's checksum is one sha256sum checks
    subprocess.run(["tar", "-xf", str(path), archive.MANIFEST, archive.MANIFEST_SUM],
                   cwd=tmp_path, check=True)  # fmt: skip
    subprocess.run(["sha256sum", "-c", "--quiet", archive.MANIFEST_SUM], cwd=tmp_path, check=True)
    manifest = archive.verify(path)
    assert set(manifest.members) == set(MEMBERS)
    with archive.member(path, "secrets/munge.key") as source:
        assert source.read() == MEMBERS["secrets/munge.key"]


def test_every_changed_byte_and_every_cut_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path)
    data = path.read_bytes()
    bad = tmp_path / "bad.tar"
    for offset in range(len(data)):
        changed = bytearray(data)
        changed[offset] ^= 0x01
        bad.write_bytes(bytes(changed))
        with pytest.raises(ConfigError, match="not a complete slurmforge backup"):
            archive.verify(bad)
    for length in range(0, len(data), 256):
        bad.write_bytes(data[:length])
        with pytest.raises(ConfigError, match="not a complete slurmforge backup"):
            archive.verify(bad)


def test_a_writer_that_does_not_commit_leaves_nothing(tmp_path: Path) -> None:
    manifest = archive.Manifest("c", "now", "24.05.8", "0.1.0", {})
    with pytest.raises(RuntimeError), archive.Writer(tmp_path, "x.tar", manifest) as writer:
        writer.add_bytes("a", b"a")
        raise RuntimeError("the cluster stopped answering")
    assert list(tmp_path.iterdir()) == []


def test_only_partial_archives_are_cleaned(tmp_path: Path) -> None:
    mine = tmp_path / ".slurmforge-c-20261125T000000Z.tar.partial"
    theirs = [tmp_path / "notes.partial", tmp_path / ".other.tar.partial", tmp_path / "x.tar"]
    for path in (mine, *theirs):
        path.write_text("x")
    assert archive.clean_partials(tmp_path) == [mine]
    assert all(p.exists() for p in theirs)
