"""The backup archive's format: what verify accepts is exactly what a finished Writer wrote."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from slurmforge.deploy.backup import archive
from slurmforge.errors import ConfigError

MEMBERS = {
    "cluster/cluster.yaml": b"name: c\n",
    "secrets/munge.key": b"k" * 700,
    "database.sql": b"",
}


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
    bad.write_bytes(data)
    # each byte changed in place and put back (rewriting the whole file each time is slow:
    # ext4 flushes a file that is truncated and written again when it is closed)
    fd = os.open(bad, os.O_RDWR)
    try:
        for offset in range(len(data)):
            os.pwrite(fd, bytes([data[offset] ^ 0x01]), offset)
            with pytest.raises(ConfigError, match="not a complete slurmforge backup"):
                archive.verify(bad)
            os.pwrite(fd, data[offset : offset + 1], offset)
    finally:
        os.close(fd)
    for length in range(0, len(data), 256):
        bad.write_bytes(data[:length])
        with pytest.raises(ConfigError, match="not a complete slurmforge backup"):
            archive.verify(bad)


def test_a_writer_that_does_not_commit_leaves_nothing(tmp_path: Path) -> None:
    manifest = archive.Manifest("c", "now", "24.05.8", "0.1.0", {})
    with pytest.raises(RuntimeError), archive.Writer(tmp_path, "x.tar", manifest) as writer:
        writer.add_bytes("state.tar", b"a")
        raise RuntimeError("the cluster stopped answering")
    assert list(tmp_path.iterdir()) == []


def test_only_partial_archives_are_cleaned(tmp_path: Path) -> None:
    mine = tmp_path / ".slurmforge-c-20261125T000000Z.tar.partial"
    theirs = [tmp_path / "notes.partial", tmp_path / ".other.tar.partial", tmp_path / "x.tar"]
    for path in (mine, *theirs):
        path.write_text("x")
    assert archive.clean_partials(tmp_path) == [mine]
    assert all(p.exists() for p in theirs)


def _crafted(
    directory: Path, entries: list[tarfile.TarInfo], listed: list[str], **manifest_fields
) -> Path:
    """An archive as a crafter would make it: each member's header as the writer makes it (or
    another type), the manifest listing ``listed`` with each member's true sha256 and its own
    checksum right: everything verify checks right but the names and types."""
    data = {info.name: b"x" * info.size for info in entries}
    manifest = archive.Manifest("c", "2026-11-25T00:00:00+00:00", "24.05.8", "0.1.0", {})
    manifest.members = {
        n: {"size": len(data.get(n, b"")), "sha256": hashlib.sha256(data.get(n, b"")).hexdigest()}
        for n in listed
    }
    for key, value in manifest_fields.items():
        setattr(manifest, key, value)
    text = manifest.dump()
    path = directory / "crafted.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for info in entries:
            info.mtime, info.mode = 0, 0o600
            tar.addfile(info, io.BytesIO(data[info.name]) if info.isfile() else None)
        for name, content in ((archive.MANIFEST, text), (archive.MANIFEST_SUM, None)):
            content = content if content is not None else archive._sum_line(text)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o600, 0
            tar.addfile(info, io.BytesIO(content))
    return path


def _file(name: str, size: int = 5) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _special(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/shadow" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    return info


def test_a_crafted_archive_with_only_layout_names_verifies(tmp_path: Path) -> None:
    """The positive control of the next test: what it crafts is accepted with good names."""
    names = ["cluster/c.yaml", "secrets/munge.key", "state.tar"]
    path = _crafted(tmp_path, [_file(n) for n in names], names)
    assert set(archive.verify(path).members) == set(names)


@pytest.mark.parametrize(
    "name",
    [
        "../../../../../../tmp/x",
        "/tmp/x",
        "cluster/../../x",
        "cluster/..",
        "cluster/a/b",
        "secrets/",
        "notes.txt",
        "state.tar/x",
        "./state.tar",
    ],
)
def test_a_member_outside_the_layout_is_refused_however_the_manifest_lists_it(
    tmp_path: Path, name: str
) -> None:
    path = _crafted(tmp_path, [_file("state.tar"), _file(name)], ["state.tar", name])
    with pytest.raises(ConfigError, match="is not one of the archive's layout") as refused:
        archive.verify(path)
    assert "nothing was restored" in refused.value.message


@pytest.mark.parametrize(
    "name", ["../../../../../../tmp/x", "/tmp/x", "cluster/../x", "MANIFEST.json"]
)
def test_a_manifest_that_lists_a_name_outside_the_layout_is_refused(
    tmp_path: Path, name: str
) -> None:
    path = _crafted(tmp_path, [_file("state.tar")], ["state.tar", name])
    with pytest.raises(ConfigError, match=r"MANIFEST\.json lists"):
        archive.verify(path)


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_special("cluster/c.yaml", tarfile.SYMTYPE), "unexpected member header"),
        (_special("cluster/c.yaml", tarfile.LNKTYPE), "unexpected member header"),
        (_special("secrets/munge.key", tarfile.CHRTYPE), "unexpected member header"),
        (_special("state.tar", tarfile.DIRTYPE), "unexpected member header"),
        (_special("jail.tar", tarfile.FIFOTYPE), "unexpected member header"),
    ],
)
def test_a_link_device_or_directory_member_is_refused(tmp_path: Path, member, why) -> None:
    path = _crafted(tmp_path, [member], [member.name])
    with pytest.raises(ConfigError, match=why):
        archive.verify(path)


def test_a_name_twice_is_refused(tmp_path: Path) -> None:
    path = _crafted(tmp_path, [_file("state.tar"), _file("state.tar")], ["state.tar"])
    with pytest.raises(ConfigError, match=r"unexpected member header 'state\.tar'"):
        archive.verify(path)


def test_a_manifest_whose_members_are_no_mapping_is_refused(tmp_path: Path) -> None:
    path = _crafted(tmp_path, [_file("state.tar")], ["state.tar"], members=["state.tar"])
    with pytest.raises(ConfigError, match=r"MANIFEST\.json lists no members"):
        archive.verify(path)


def test_the_writer_writes_only_layout_names(tmp_path: Path) -> None:
    manifest = archive.Manifest("c", "now", "24.05.8", "0.1.0", {})
    with archive.Writer(tmp_path, "x.tar", manifest) as writer:
        for name in ("../x", "/x", "cluster/a/b", "other"):
            with pytest.raises(ValueError, match="member name"):
                writer.add_bytes(name, b"a")
