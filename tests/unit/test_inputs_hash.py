"""The inputs hash changes exactly when an input of the image changes (no Docker)."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from slurmforge import matrix, versions
from slurmforge.plan import changes
from slurmforge.render import DockerfileRenderer, inputs_hash
from tests.common import ROOT

PARENTS = {
    "runtime/debian12-24.11.5": "sha256:" + "1" * 64,
    "slurm-debs/debian12-24.11.5": "sha256:" + "2" * 64,
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "images", tmp_path / "images")
    shutil.copy(ROOT / "versions.yaml", tmp_path / "versions.yaml")
    for extra in ("jail", "rootfs"):  # what build contexts take besides images/
        shutil.copytree(
            ROOT / extra, tmp_path / extra, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


def _login_hash(project: Path, parents: dict[str, str] = PARENTS) -> tuple[str, dict]:
    cfg = versions.load(project / "versions.yaml")
    targets = {
        t.component: t for t in matrix.expand(cfg, "default", matrix.cells_of(cfg, "default"))
    }
    login = targets["login"]
    refs = {p.split("/")[0]: targets[p.split("/")[0]].ref for p in login.parents}
    manifest = DockerfileRenderer(cfg).render(login, refs).manifest(parents)
    return inputs_hash(manifest), manifest


def test_same_inputs_same_hash(project: Path) -> None:
    assert _login_hash(project)[0] == _login_hash(project)[0]


def test_context_file_content_changes_hash_and_is_named(project: Path) -> None:
    before, old = _login_hash(project)
    conf = project / "images/login/sshd_config.d/slurmforge.conf"
    conf.write_text(conf.read_text() + "# tweak\n")
    after, new = _login_hash(project)
    assert before != after
    assert changes(old, new) == ["files:sshd_config.d/slurmforge.conf"]


def test_mtime_alone_does_not_change_hash(project: Path) -> None:
    before, _ = _login_hash(project)
    os.utime(project / "images/login/ssh-host-keys.sh", (1, 1))
    assert _login_hash(project)[0] == before


def test_file_mode_changes_hash(project: Path) -> None:
    before, _ = _login_hash(project)
    (project / "images/login/ssh-host-keys.sh").chmod(0o755)
    assert _login_hash(project)[0] != before


def test_added_file_changes_hash(project: Path) -> None:
    before, old = _login_hash(project)
    (project / "images/login/extra.conf").write_text("x\n")
    after, new = _login_hash(project)
    assert after != before
    assert changes(old, new) == ["files:extra.conf"]


def test_parent_image_id_changes_hash(project: Path) -> None:
    before, old = _login_hash(project)
    moved = {**PARENTS, "runtime/debian12-24.11.5": "sha256:" + "3" * 64}
    after, new = _login_hash(project, moved)
    assert after != before
    assert changes(old, new) == ["parents:runtime/debian12-24.11.5"]


def test_two_sets_that_differ_in_their_registry_give_the_gpu_worker_one_hash() -> None:
    """The worker is FROM its cell's slurmd under the set's own registry; that parent counts
    by its image ID, so the set that shares the cell tags the worker rather than building it."""
    from slurmforge.app import Project, Selection

    seen = []
    for set_name in ("default", "ci"):
        project = Project(Selection(ROOT / "versions.yaml", set_name))
        worker = project.by_id["worker/debian12-24.05.8-12.2.2"]
        rendered = project.rendered(worker)
        ids = {parent: f"sha256:{parent}" for parent in worker.parents}
        seen.append((rendered.dockerfile, inputs_hash(rendered.manifest(ids))))
    (default_file, default_hash), (ci_file, ci_hash) = seen
    assert "\nFROM 127.0.0.1:5000/slurmforge/slurmd:" in default_file
    assert "\nFROM ghcr.io/slurmforge/slurmd:" in ci_file
    assert default_hash == ci_hash
    moved = {parent: f"sha256:{parent}-rebuilt" for parent in worker.parents}
    assert inputs_hash(rendered.manifest(moved)) != ci_hash


def test_shared_macro_change_reaches_the_dockerfile(project: Path) -> None:
    before, old = _login_hash(project)
    macros = project / "images/macros.j2"
    macros.write_text(macros.read_text().replace("rm -rf /tmp/debs", "rm -rf /tmp/debs /tmp/x"))
    after, new = _login_hash(project)
    assert after != before
    assert changes(old, new) == ["dockerfile"]


def test_other_components_files_do_not_change_hash(project: Path) -> None:
    before, _ = _login_hash(project)
    (project / "images/slurmd/Dockerfile.j2").write_text("FROM scratch\n")
    (project / "images/runtime/entrypoint.sh").write_text("#!/bin/sh\n")
    assert _login_hash(project)[0] == before


def test_build_context_tar_is_deterministic(project: Path) -> None:
    cfg = versions.load(project / "versions.yaml")
    login = next(
        t
        for t in matrix.expand(cfg, "default", matrix.cells_of(cfg, "default"))
        if t.component == "login"
    )
    rendered = DockerfileRenderer(cfg).render(login, {"runtime": "r", "slurm-debs": "d"})
    first, second = io.BytesIO(), io.BytesIO()
    rendered.write_context(first)
    os.utime(project / "images/login/ssh-host-keys.sh", (5, 5))
    rendered.write_context(second)
    assert first.getvalue() == second.getvalue()


def test_template_errors_name_the_template(project: Path) -> None:
    from slurmforge.errors import ConfigError

    template = project / "images/login/Dockerfile.j2"
    template.write_text(template.read_text() + "RUN echo {{ no_such_value }}\n")
    with pytest.raises(
        ConfigError, match=r"images/login/Dockerfile\.j2: 'no_such_value' is undefined"
    ):
        _login_hash(project)
    template.write_text("FROM x\n{% if %}\n")
    with pytest.raises(ConfigError, match=r"images/login/Dockerfile\.j2:2: "):
        _login_hash(project)


def test_the_arch_is_an_input_and_amd64_hashes_stay_as_they_were(project: Path) -> None:
    from slurmforge import bootstrap

    text = (project / "versions.yaml").read_text()
    text = text.replace('cuda: ["12.2.2"]\n', 'cuda: ["12.2.2"]\n      arch: [amd64, arm64]\n', 1)
    (project / "versions.yaml").write_text(text)
    cfg = versions.load(project / "versions.yaml")
    targets = {t.id: t for t in matrix.expand(cfg, "default", matrix.cells_of(cfg, "default"))}
    renderer = DockerfileRenderer(cfg)

    def manifest(target_id: str) -> dict:
        target = targets[target_id]
        refs = {p.split("/")[0]: targets[p].ref for p in target.parents}
        return renderer.render(target, refs).manifest({})

    amd, arm = manifest("mariadb/debian12"), manifest("mariadb/debian12-arm64")
    assert "arch" not in amd and arm["arch"] == "arm64"
    assert changes(amd, arm) == ["arch", "dockerfile"]  # FROM the arm64 base
    # the base: the bootstrap spec as it was (with its arch) for amd64, arm64 for the other
    spec = cfg.versions.distros["debian12"].bootstrap
    native = bootstrap.manifest(bootstrap.Base(spec, "amd64"))
    assert native["bootstrap"] == {**spec.model_dump(mode="json"), "arch": "amd64"}
    foreign = bootstrap.manifest(bootstrap.Base(spec, "arm64"))
    assert inputs_hash(foreign) != inputs_hash(native)
    assert "--architectures=arm64" in bootstrap.command(bootstrap.Base(spec, "arm64"), Path("x"))
