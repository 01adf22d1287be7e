"""versions.yaml schema: the shipped file loads; bad input names file, key path, expectation."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from slurmforge import config, matrix, versions
from slurmforge.errors import ConfigError
from slurmforge.pins import UNPINNED
from tests.common import ROOT


def test_shipped_file_loads() -> None:
    cfg = versions.load(ROOT / "versions.yaml")
    v = cfg.versions
    assert v.distros["debian12"].bootstrap is not None
    assert v.distros["ubuntu22.04"].image == "ubuntu:22.04"
    assert set(v.slurm) == {"23.11.11", "24.05.8", "24.11.5", "25.11.7", "26.05.3"}
    assert all(s.pinned for slurm in v.slurm.values() for s in slurm.sources)
    assert set(v.tools.names()) >= {"pyxis", "enroot", "nccl", "nccl-tests"}
    assert [c.name for c in matrix.cells_of(cfg, "default")] == ["24.05.8-cuda12.2.2-debian12"]
    assert {(c.distro, c.slurm) for c in matrix.cells_of(cfg, "ci")} == {
        ("debian12", "23.11.11"),
        ("debian12", "24.05.8"),
    }
    # Every shipped source is pinned: no set needs --allow-unpinned anywhere.
    for _, tool in v.tools.items():
        if isinstance(tool, config.UserspaceTool):
            spaces = [tool.userspace, *(r.userspace for r in tool.releases.values())]
            locks = [s.lock for s in spaces if s and s.lock]
            for lock in locks:  # every requirement pinned to one version, with its hashes
                lines = (ROOT / lock).read_text().splitlines()
                text = "\n".join(ln for ln in lines if not ln.lstrip().startswith("#"))
                entries = re.split(r"\n(?=[a-z])", text.strip())
                assert entries and all(re.match(r"[a-z0-9._-]+==\S+ \\\n", e) for e in entries)
                assert all("--hash=sha256:" in e for e in entries), lock
            pins = [sha for s in spaces if s for w in s.wheels for sha in w.sha256.values()]
            assert (pins or locks) and UNPINNED not in pins
            continue
        for source in (*tool.sources, *(s for r in tool.releases.values() for s in r.sources)):
            assert source.pinned
    # pyxis and enroot are picked per Slurm series, NCCL and nccl-tests per CUDA version.
    assert v.release("pyxis", "23.11.11", None)[0] == "0.20.0"
    assert v.release("pyxis", "24.05.8", None)[0] == "0.24.0"
    assert v.release("enroot", "24.05.8", "12.9.1")[0] == "3.5.0"
    assert v.release("enroot", "26.05.3", "12.2.2")[0] == "4.1.2"
    assert v.release("nccl-tests", "24.05.8", "12.9.1")[0] == "2.19.6"
    assert v.release("nccl", "26.05.3", "12.2.2")[0] == "2.18.3"
    assert [c.name for c in matrix.cells_of(cfg, "current")] == [
        f"{s}-cuda{c}-debian12" for s in ("25.11.7", "26.05.3") for c in ("12.2.2", "12.9.1")
    ]


def _set(path: str, value: object) -> Callable[[dict], None]:
    def mutate(data: dict) -> None:
        *parents, last = path.split("/")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is _DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


_DELETE = object()
GOOD_SHA = "e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332"

MALFORMED = {
    "unknown top-level key": (_set("colour", "red"), "colour: unknown key"),
    "unknown nested key": (
        _set("slurm/24.11.5/sources/0/mirror", "x"),
        'slurm."24.11.5".sources[0].mirror: unknown key',
    ),
    "wrong type (string uid)": (_set("accounts/slurm/uid", "401"), "accounts.slurm.uid: "),
    "uid out of range": (_set("accounts/munge/uid", 0), "accounts.munge.uid: "),
    "missing key": (
        _set("distros/debian12/bootstrap/suite", _DELETE),
        "distros.debian12.bootstrap.suite: required key is missing",
    ),
    "malformed sha256": (
        _set("slurm/24.11.5/sources/0/sha256", "abc"),
        'slurm."24.11.5".sources[0].sha256: expected 64 lowercase hex',
    ),
    "uppercase sha256": (
        _set("slurm/24.11.5/sources/0/sha256", GOOD_SHA.upper()),
        'slurm."24.11.5".sources[0].sha256: expected 64 lowercase hex',
    ),
    "ftp url": (
        _set("slurm/24.11.5/sources/0/url", "ftp://example.org/slurm.tar.gz"),
        'slurm."24.11.5".sources[0].url: expected a URL starting with http://, https://, file://',
    ),
    "no sources": (_set("slurm/24.11.5/sources", []), 'slurm."24.11.5".sources: '),
    "malformed slurm version": (
        _set("slurm/24.11", {"sources": [{"url": "http://x/y", "sha256": GOOD_SHA}]}),
        "slurm.\"24.11\": expected a version like '24.11.5'",
    ),
    "unknown distro in set": (
        _set("sets/default/matrix/distro", ["debian13"]),
        "sets.default.matrix.distro[0]: unknown distro 'debian13'",
    ),
    "unknown slurm version in set": (
        _set("sets/ci/matrix/slurm", ["23.11.11", "25.05.0"]),
        "sets.ci.matrix.slurm[1]: unknown Slurm version '25.05.0'",
    ),
    "missing slurm axis in set": (
        _set("sets/default/matrix/slurm", _DELETE),
        "sets.default.matrix.slurm: required key is missing",
    ),
    "empty slurm axis in set": (
        _set("sets/default/matrix/slurm", []),
        "sets.default.matrix.slurm: ",
    ),
    "cuda as a number": (
        _set("sets/default/matrix/cuda", [12.2]),
        "sets.default.matrix.cuda[0]: input should be a valid string, got float",
    ),
    "duplicate axis entries": (
        _set("sets/default/matrix/slurm", ["24.11.5", "24.11.5"]),
        "sets.default.matrix.slurm: duplicate entries",
    ),
    "both bootstrap and image": (
        _set("distros/debian12/image", "debian:bookworm"),
        "distros.debian12: expected exactly one of 'bootstrap' or 'image'",
    ),
    "bad image reference": (
        _set("distros/ubuntu22.04/image", "Ubuntu 22.04"),
        'distros."ubuntu22.04".image: expected an image reference',
    ),
    "unknown arch": (
        _set("sets/default/matrix/arch", ["amd64", "riscv64"]),
        "sets.default.matrix.arch[1]: Input should be 'amd64' or 'arm64', got 'riscv64'",
    ),
    "duplicate arch": (
        _set("sets/default/matrix/arch", ["arm64", "arm64"]),
        "sets.default.matrix.arch: duplicate entries in ['arm64', 'arm64']",
    ),
    "unknown arch of an included cell": (
        _set(
            "sets/ci/include",
            [{"distro": "debian12", "slurm": "24.05.8", "cuda": "12.2.2", "arch": "x86_64"}],
        ),
        "sets.ci.include[0].arch: Input should be 'amd64' or 'arm64', got 'x86_64'",
    ),
    "bootstrap arch moved to the matrix": (
        _set("distros/debian12/bootstrap/arch", "amd64"),
        "distros.debian12.bootstrap.arch: unknown key",
    ),
    "unknown tag placeholder": (
        _set("sets/default/tags", ["{version}-{distro}"]),
        "sets.default.tags[0]: unknown placeholder {version}",
    ),
    "set without cells": (
        _set("sets/default/matrix", _DELETE),
        "sets.default: expected 'matrix' or 'include'",
    ),
    "git commit not 40 hex digits": (
        _set("slurm/24.05.8/sources/0/commit", "46879dc2d"),
        'slurm."24.05.8".sources[0].commit: expected a full commit ID (40 lowercase hex',
    ),
    "git clone url over ssh": (
        _set("slurm/24.05.8/sources/0/git", "ssh://git@github.com/SchedMD/slurm.git"),
        'slurm."24.05.8".sources[0].git: expected a URL starting with https://, git://, file://',
    ),
    "git source with a sha256": (
        _set("slurm/24.05.8/sources/0/sha256", GOOD_SHA),
        "slurm.\"24.05.8\".sources[0]: a git source is pinned by 'commit'; remove 'sha256'",
    ),
    "git source without a tag": (
        _set("tools/enroot/releases/3.5.0/sources/0/tag", _DELETE),
        'tools.enroot.releases."3.5.0".sources[0].tag: required key is missing',
    ),
    "slurm without its pyxis pick": (
        _set("slurm/23.11.11/tools", _DELETE),
        'slurm."23.11.11".tools.pyxis: required key is missing',
    ),
    "slurm picks an undeclared pyxis": (
        _set("slurm/23.11.11/tools/pyxis", "0.19.0"),
        "slurm.\"23.11.11\".tools.pyxis: unknown release '0.19.0'; expected one of 0.20.0, 0.24.0",
    ),
    "non-list components": (
        _set("distros/debian12/bootstrap/components", "main"),
        "distros.debian12.bootstrap.components: ",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_names_key_path(case: str, shipped: dict, write_config) -> None:
    mutate, expected = MALFORMED[case]
    data = copy.deepcopy(shipped)
    mutate(data)
    path = write_config(data)
    with pytest.raises(ConfigError) as err:
        versions.load(path)
    message = err.value.message
    assert message.startswith(f"{path}: "), message
    assert expected in message, message
    assert "\n" not in message
    assert err.value.exit_code == 2


def test_duplicate_yaml_key_is_refused(write_config) -> None:
    text = (ROOT / "versions.yaml").read_text() + "\naccounts:\n  slurm: {uid: 1, gid: 1}\n"
    path = write_config({}, text=text)
    with pytest.raises(ConfigError, match=r"invalid YAML: duplicate key 'accounts'"):
        versions.load(path)


def test_invalid_yaml_reports_line(write_config) -> None:
    path = write_config({}, text="accounts: [unclosed\n")
    with pytest.raises(ConfigError, match=r"line 2 column 1: invalid YAML"):
        versions.load(path)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("accounts:\n\tslurm: {}\n", "line 2 column 1: invalid YAML: a tab, which YAML does not "
         "allow for indentation (indent with spaces)"),
        ("accounts: @slurm\n", "line 1 column 11: invalid YAML: found '@' (U+0040), which cannot "
         "start any token"),
    ],
    ids=["tab", "at-sign"],
)  # fmt: skip
def test_a_character_yaml_refuses_is_named(write_config, text: str, said: str) -> None:
    """libyaml's message says a character cannot start a token but not which: the error does,
    and for a tab says why (cluster files and layers are read by the same function)."""
    path = write_config({}, text=text)
    with pytest.raises(ConfigError) as err:
        versions.load(path)
    assert err.value.message == f"{path}: {said}"


def test_top_level_must_be_mapping(write_config) -> None:
    path = write_config({}, text="- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level, got list"):
        versions.load(path)


def test_duplicate_cell_in_include(shipped: dict, write_config) -> None:
    shipped["sets"]["default"]["include"] = [
        {"distro": "debian12", "slurm": "24.05.8", "cuda": "12.2.2"}
    ]
    with pytest.raises(
        ConfigError,
        match=r"sets\.default\.include\[0\]: duplicate cell "
        r"24\.05\.8-cuda12\.2\.2-debian12",
    ):
        versions.load(write_config(shipped))  # refused on load: the set's tags are checked there


def test_unknown_set(tmp_path: Path) -> None:
    cfg = versions.load(ROOT / "versions.yaml")
    with pytest.raises(
        ConfigError, match="unknown matrix set 'nightly'; expected one of ci, current, default"
    ):
        matrix.cells_of(cfg, "nightly")


def test_lock_file_supplies_unpinned_checksums(shipped: dict, write_config) -> None:
    url = "https://download.schedmd.com/slurm/slurm-24.11.5.tar.bz2"
    shipped["slurm"]["24.11.5"]["sources"] = [{"url": url, "sha256": "unpinned"}]
    path = write_config(shipped)
    path.with_name("versions.lock").write_text(f'{{"sources": {{"{url}": "{GOOD_SHA}"}}}}')
    cfg = versions.load(path)
    assert cfg.sha256_of(cfg.versions.slurm["24.11.5"].sources[0]) == GOOD_SHA
    path.with_name("versions.lock").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"versions\.lock: expected JSON"):
        versions.load(path)
