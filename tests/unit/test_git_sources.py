"""The git source kind against real repositories made with git and served by file:// URLs: a
mirror laid out as <host>/<path>, submodules by gitlink, tags checked against the pinned commit,
and the same commit always giving the same bytes."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest

from slurmforge import config, versions
from slurmforge.app import FetchOptions, Project, Selection
from slurmforge.errors import ConfigError, PinError
from slurmforge.pins import GitSource
from slurmforge.sources import Cache, Fetched, resolve_mirror
from tests.gitrepos import Repo, add_submodule, git, make_repo


def _mirror(mirror: Path, repo: Repo, host_path: str) -> None:
    """Publish ``repo`` in ``mirror`` as a bare clone at <host>/<path>, as the shared mirror."""
    dest = mirror / host_path
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(repo.path.parent, "clone", "-q", "--bare", repo.url, str(dest))


@pytest.fixture
def cfg(shipped: dict, write_config) -> config.Config:
    return versions.load(write_config(shipped))


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Repo, Path]:
    """A superproject with one submodule whose URL is a (made-up) https origin, and a mirror that
    holds both under their hosts' paths."""
    sub = make_repo(tmp_path / "src/sub", {"lib.c": "int x;\n"}, tag="s1")
    top = make_repo(tmp_path / "src/top", {"Makefile": "all:\n", "bin/run.sh": "#!/bin/sh\n"})
    top = add_submodule(top, sub, "deps/sub", "https://git.example.org/sub.git")
    mirror = tmp_path / "mirror"
    _mirror(mirror, top, "code.example.org/top.git")
    _mirror(mirror, sub, "git.example.org/sub.git")
    return top, mirror


def _source(top: Repo, **kw: str) -> GitSource:
    return GitSource(
        **{"git": "https://code.example.org/top.git", "tag": top.tag, "commit": top.commit, **kw}
    )


def test_fetch_by_commit_through_a_mirror_with_submodules(cfg, tmp_path, upstream) -> None:
    top, mirror = upstream
    cache = Cache(tmp_path / "cache")
    got = cache.fetch(cfg, [_source(top)], mirror=str(mirror))
    assert got.path == tmp_path / "cache" / top.commit / "top-v1.0.tar"
    assert got.sha256 == top.commit  # the commit is the content key
    with tarfile.open(got.path) as tar:
        members = {m.name: m for m in tar}
        assert tar.extractfile("top-v1.0/deps/sub/lib.c").read() == b"int x;\n"  # type: ignore[union-attr]
    assert members["top-v1.0/bin/run.sh"].mode == 0o755
    assert members["top-v1.0/Makefile"].mode == 0o644
    assert {m.uid for m in members.values()} == {0}
    assert ".git" not in {Path(n).name for n in members}

    # Same commit, same bytes: fetched again from scratch, the archive is identical.
    first = hashlib.sha256(got.path.read_bytes()).hexdigest()
    got.path.unlink()
    again = cache.fetch(cfg, [_source(top)], mirror=str(mirror))
    assert hashlib.sha256(again.path.read_bytes()).hexdigest() == first
    # Cached: no mirror (and no network) needed any more.
    assert cache.fetch(cfg, [_source(top)]).path == again.path


def test_a_tag_that_moved_is_refused_naming_both_commits(cfg, tmp_path, upstream) -> None:
    top, mirror = upstream
    (top.path / "Makefile").write_text("all: evil\n")
    git(top.path, "commit", "-q", "-am", "moved")
    git(top.path, "tag", "-f", "-a", "-m", "v1.0", "v1.0")
    moved = git(top.path, "rev-parse", "HEAD")
    (mirror / "code.example.org/top.git").rename(tmp_path / "old.git")
    _mirror(mirror, top, "code.example.org/top.git")
    with pytest.raises(PinError) as err:
        Cache(tmp_path / "cache").fetch(cfg, [_source(top)], mirror=str(mirror))
    assert f"tag v1.0 points to {moved}" in err.value.message
    assert f"but the pin is {top.commit}" in err.value.message
    assert err.value.exit_code == 2
    assert not (tmp_path / "cache" / top.commit).exists()


def test_a_submodule_missing_from_the_mirror_is_named(cfg, tmp_path, upstream) -> None:
    top, mirror = upstream
    (mirror / "git.example.org/sub.git").rename(tmp_path / "elsewhere.git")
    cache = Cache(tmp_path / "cache")
    with pytest.raises(PinError) as err:
        cache.fetch(cfg, [_source(top)], mirror=str(mirror))
    assert "submodule deps/sub (https://git.example.org/sub.git)" in err.value.message
    assert err.value.exit_code == 2
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))  # nothing half-written


def test_a_pin_its_tag_does_not_name_is_refused(cfg, tmp_path, upstream) -> None:
    top, mirror = upstream
    wrong = "0123456789abcdef0123456789abcdef01234567"
    source = _source(top, commit=wrong)
    with pytest.raises(PinError, match=f"points to {top.commit} .* but the pin is {wrong}"):
        Cache(tmp_path / "cache").fetch(cfg, [source], mirror=str(mirror))


def test_lightweight_tags_and_file_urls_work_without_a_mirror(cfg, tmp_path) -> None:
    repo = make_repo(tmp_path / "plain", {"README": "hi\n"}, tag="v2", annotated=False)
    source = GitSource(git=repo.url, tag="v2", commit=repo.commit)
    got = Cache(tmp_path / "cache").fetch(cfg, [source])
    with tarfile.open(got.path) as tar:
        assert tar.getnames() == ["plain-v2", "plain-v2/README"]


def test_a_mirror_directory_that_does_not_exist_is_refused(tmp_path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"--mirror: mirror directory .*/nope does not exist"):
        resolve_mirror(str(tmp_path / "nope"))
    monkeypatch.setenv("SLURMFORGE_MIRROR", str(tmp_path / "gone"))
    with pytest.raises(ConfigError, match=r"\$SLURMFORGE_MIRROR: mirror directory"):
        resolve_mirror(None)
    assert resolve_mirror("https://mirror.example/src") == "https://mirror.example/src"


def test_two_releases_of_one_repository_stay_apart(cfg) -> None:
    """pyxis 0.20.0 (for 23.11) and 0.24.0 (for 24.05) share a URL: what a run fetched is told
    apart by commit, so each Slurm's build context names its own release."""
    project = Project(Selection(cfg.path, "ci", (), ("slurm-debs",)))
    fetched = []
    for release in ("0.24.0", "0.20.0"):
        (source,) = cfg.versions.tools["pyxis"].releases[release].sources
        tar = project.cache.root / source.commit / source.filename
        fetched.append(Fetched(source, tar, source.commit))
    project.remember(fetched)
    debs = [t for t in project.targets if t.component == "slurm-debs"]
    assert len(debs) == 2
    for target in debs:
        version, (source,) = cfg.versions.release("pyxis", target.slurm, None)
        got = project.context(target).files["pyxis"]
        assert got.arcname == f"sources/pyxis/pyxis-v{version}.tar"
        assert got.path == project.cache.root / source.commit / f"pyxis-v{version}.tar"


def test_a_run_fetches_each_release_it_needs(cfg, monkeypatch) -> None:
    project = Project(Selection(cfg.path, "ci", (), ("slurm-debs",)))
    asked: list[str] = []

    def fetch(config, candidates, **kw):  # the network edge: record what a run asks for
        (source,) = candidates
        asked.append(source.key)
        return Fetched(source, project.cache.root / "x", "x")

    monkeypatch.setattr(project.cache, "fetch", fetch)
    project.fetch(FetchOptions())
    releases = cfg.versions.tools["pyxis"].releases
    assert {r.sources[0].key for r in releases.values()} <= set(asked)
