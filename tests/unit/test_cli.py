"""Bad input through the real `invoke` entry point: one line, exit 2, no traceback, nothing built.

These never reach a Docker daemon: either the input is refused before one is needed, or
DOCKER_HOST points at a socket that does not exist.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmforge import context, matrix, versions
from tests.common import ROOT, dump_yaml
from tests.gitrepos import make_repo
from tests.unit.helpers import assert_clean_failure, run_invoke

NO_DAEMON = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def test_unknown_component() -> None:
    assert_clean_failure(run_invoke("build", "--component", "gpu"), "--component 'gpu'")


def test_unknown_cell() -> None:
    assert_clean_failure(run_invoke("plan", "--cell", "9.9.9-cuda1.0.0-x"), "--cell '9.9.9")


def test_unknown_set() -> None:
    assert_clean_failure(run_invoke("matrix", "--set", "nightly"), "unknown matrix set 'nightly'")


def test_unknown_key_in_config(tmp_path: Path, shipped: dict) -> None:
    shipped["slurm"]["24.11.5"]["sources"][0]["sha"] = "x"
    path = tmp_path / "versions.yaml"
    path.write_text(dump_yaml(shipped))
    assert_clean_failure(
        run_invoke("build", "--config", str(path)),
        f'{path}: slurm."24.11.5".sources[0].sha: unknown key',
    )


def _slurm_only(shipped: dict, tmp_path: Path) -> None:
    """Make the default set build Slurm 24.11.5 with a pyxis from a local git repository, so that
    `fetch --component slurm-debs` needs no network and no mirror."""
    pyxis = make_repo(tmp_path / "pyxis", {"Makefile": "all:\n"}, tag="v0.24.0")
    shipped["sets"]["default"]["matrix"]["slurm"] = ["24.11.5"]
    shipped["tools"]["pyxis"]["releases"]["0.24.0"]["sources"] = [
        {"git": pyxis.url, "tag": pyxis.tag, "commit": pyxis.commit}
    ]


def test_docker_unreachable_says_how_to_start_it() -> None:
    proc = run_invoke("build")
    assert_clean_failure(proc, "Docker daemon is not reachable at unix:///nonexistent")
    assert "hint: start it with `scripts/setup`" in proc.stderr


def test_checksum_mismatch_at_fetch_keeps_nothing(tmp_path: Path, shipped: dict) -> None:
    tarball = tmp_path / "slurm-24.11.5.tar.gz"
    tarball.write_bytes(b"not what was pinned")
    shipped["slurm"]["24.11.5"]["sources"] = [{"url": tarball.as_uri(), "sha256": "a" * 64}]
    _slurm_only(shipped, tmp_path)
    path = tmp_path / "versions.yaml"
    path.write_text(dump_yaml(shipped))
    actual = hashlib.sha256(tarball.read_bytes()).hexdigest()
    # the cache of the config's own project (not the checkout's, which CI's prebuild fills
    # meanwhile), there already, as on a machine that has fetched before
    cache = tmp_path / ".cache" / "sources"
    cache.mkdir(parents=True)
    proc = run_invoke("fetch", "--config", str(path), "--component", "slurm-debs")
    assert_clean_failure(proc, f"checksum mismatch: expected sha256 {'a' * 64}, got {actual}")
    assert list(cache.iterdir()) == []  # nothing kept, finished or partial


@pytest.mark.parametrize("fmt", ["json", "github", "table"])
def test_matrix_formats(fmt: str) -> None:
    proc = run_invoke("matrix", "--set", "ci", "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    assert "24.05.8-cuda12.2.2-debian12" in proc.stdout
    assert "23.11.11-cuda12.2.2-debian12" in proc.stdout


@pytest.mark.parametrize(
    "line",
    [
        ["render", "--help"],
        ["restore", "-h"],
        ["scale", "--help"],
        ["jail-populate", "--help"],
        ["restore", "backup.tar", "--force", "--help"],
        ["render", "--out", "--help"],
        ["deploy", "--help"],
        ["login", "--user", "--help"],
    ],
)
def test_help_after_a_task_is_that_tasks_help_and_nothing_runs(
    line: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`invoke render --help` wrote every Dockerfile under ./--help: invoke's parser took the
    flag as the directory, the positional argument still missing (scale refused it as a node
    count). A `--help` anywhere after a task's name is that task's help, and nothing runs."""
    monkeypatch.chdir(tmp_path)
    proc = run_invoke(*line)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"Usage: inv[oke] [--core-opts] {line[0]} [--options]"), proc
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("line", "named"),
    [
        (["render", "--out", ""], "--out ''"),
        (["deploy", "--dry-run", "--cluster", "", "--out", "{tmp}/o"], "--cluster ''"),
        (["deploy", "--dry-run", "--out", " "], "--out ' '"),
        (["status", "--cluster", ""], "--cluster ''"),
        (["down", "--cluster", ""], "--cluster ''"),
        (["build", "--component", "prometheus", "--component", ""], "--component ''"),
    ],
)
def test_an_empty_value_is_refused_not_taken_for_the_default(
    line: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script's `--cluster "$UNSET"` acted on the default cluster file (and deploy/out), and
    `render --out ''` wrote into the current directory: an empty value is refused."""
    monkeypatch.chdir(tmp_path)
    proc = run_invoke(*(arg.replace("{tmp}", str(tmp_path)) for arg in line))
    assert_clean_failure(proc, f"{named}: expected a value")
    assert list(tmp_path.iterdir()) == []


def test_a_directory_the_system_will_not_create_is_one_error_line(tmp_path: Path) -> None:
    too_long = tmp_path / ("d" * 300)
    assert_clean_failure(run_invoke("render", "--out", str(too_long)), "File name too long")
    proc = run_invoke("render", "--out", "/proc/slurmforge-test", "--component", "prometheus")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "error: /proc/slurmforge-test: No such file or directory\n"


def test_matrix_bad_format() -> None:
    assert_clean_failure(run_invoke("matrix", "--format", "xml"), "--format 'xml'")


def test_render_writes_dockerfiles(tmp_path: Path) -> None:
    proc = run_invoke("render", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    login = (tmp_path / "login/debian12-24.05.8/Dockerfile").read_text()
    assert "FROM slurmforge/runtime:debian12-24.05.8" in login
    assert (
        "COPY --from=slurmforge/slurm-debs:debian12-24.05.8 /debs/slurm-smd-libnss-slurm_*.deb"
        in login
    )
    assert "mmdebstrap" in (tmp_path / "base/debian12/mmdebstrap.cmd").read_text()


def test_lock_then_fetch_through_a_mirror_directory(tmp_path: Path, shipped: dict) -> None:
    """An unpinned source is refused, locked from a trusted origin, then fetched via a mirror."""
    payload = b"pretend slurm tarball"
    origin = tmp_path / "origin" / "slurm-24.11.5.tar.gz"
    origin.parent.mkdir()
    origin.write_bytes(payload)
    shipped["slurm"]["24.11.5"]["sources"] = [{"url": origin.as_uri(), "sha256": "unpinned"}]
    _slurm_only(shipped, tmp_path)
    config = tmp_path / "project" / "versions.yaml"
    config.parent.mkdir()
    config.write_text(dump_yaml(shipped))

    refused = run_invoke("fetch", "--config", str(config), "--component", "slurm-debs")
    assert_clean_failure(refused, "sha256 is 'unpinned'; refusing to use it")

    untrusted = run_invoke(
        "lock", "--config", str(config), "--component", "slurm-debs", "--trust", "https://x/"
    )
    assert_clean_failure(untrusted, "sha256 is 'unpinned'")
    assert not (tmp_path / "project/versions.lock").exists()

    origin_uri = (tmp_path / "origin").as_uri()
    locked = run_invoke(
        "lock", "--config", str(config), "--component", "slurm-debs", "--trust", origin_uri
    )
    assert locked.returncode == 0, locked.stderr
    sha = hashlib.sha256(payload).hexdigest()
    assert (tmp_path / "project/versions.lock").read_text().count(sha) == 1

    # file:// sources are not rewritten; an http one is, onto <mirror>/<host>/<path>.
    shipped["slurm"]["24.11.5"]["sources"] = [
        {"url": "https://download.example/slurm/slurm-24.11.5.tar.gz", "sha256": sha}
    ]
    config.write_text(dump_yaml(shipped))
    mirror = tmp_path / "mirror"
    (mirror / "download.example/slurm").mkdir(parents=True)
    (mirror / "download.example/slurm/slurm-24.11.5.tar.gz").write_bytes(payload)
    fetched = run_invoke(
        "fetch", "--config", str(config), "--component", "slurm-debs",
        env={"SLURMFORGE_MIRROR": str(mirror)},
    )  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    assert (tmp_path / f"project/.cache/sources/{sha}/slurm-24.11.5.tar.gz").read_bytes() == payload


def test_push_refuses_a_negative_retry_count() -> None:
    assert_clean_failure(
        run_invoke("push", "--retries", "-1"), "--retries '-1': expected an integer >= 0"
    )


def test_a_no_op_build_is_answered_before_any_heavy_library_loads() -> None:
    """B1's fast path: when nothing changed, `invoke build` answers from its stamp before
    pydantic, jinja2 or the Docker SDK are imported (they cost more than the answer)."""
    code = f"""
import sys
from slurmforge import fastpath
fastpath.check = lambda *args: []  # what it answers when nothing changed since the last build
from invoke.program import Program
try:
    Program(name="Invoke", binary="invoke").run(
        ["invoke", "--search-root", {str(ROOT)!r}, "build", "--set", "default"]
    )
except SystemExit as exc:
    assert not exc.code, exc.code
print(sorted(m for m in ("docker", "pydantic", "jinja2", "slurmforge.app") if m in sys.modules))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout


def test_the_environments_invoke_answers_a_no_op_build_without_loading_invoke() -> None:
    """The `invoke` script (slurmforge/launch.py) answers `invoke build` [--set S] from the
    stamp, as the task prints it, before invoke itself is imported; any other command line,
    or a build with anything to do, is handed to invoke."""
    row = {"target": "base/debian12", "status": "cached", "seconds": 0.0, "size": 0, "note": "x"}
    code = f"""
import sys
from slurmforge import fastpath, launch
fastpath.check = lambda config, name, cells, components: [{row!r}] if name == "ci" else None
print(launch.answered(["build", "--set", "ci"]), launch.answered(["build", "--set=ci"]))
print(launch.answered(["build"]), launch.answered(["build", "--set", "ci", "--cell", "c"]))
print(launch.answered(["deploy"]), "invoke" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["target", "status", "time", "size", "note"], proc.stdout
    assert lines[-3:] == ["True True", "False False", "False False"], proc.stdout
    script = Path(sys.executable).parent / "invoke"
    assert "slurmforge.launch" in script.read_text()  # what pyproject.toml installs


def test_output_to_a_reader_that_went_away_ends_without_a_traceback() -> None:
    """`invoke --list | head`: the reader gone before the list is written (here: before invoke
    starts) ends the command quietly, as a shell tool does. Python buffers the list (stdout is
    a pipe) unless PYTHONUNBUFFERED is set, as it was on one machine and not in a fresh run: the
    failed write then comes at the flush, which must be the command's, not Python's at exit."""
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    argv = [str(Path(sys.executable).parent / "invoke"), "--list"]
    with os.fdopen(write, "w") as gone:
        proc = subprocess.run(
            argv, stdout=gone, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
        )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "", proc.stderr


def _arm64_cell(shipped: dict, tmp_path: Path, cuda: str) -> Path:
    shipped["sets"]["default"]["include"] = [
        {"distro": "debian12", "slurm": "24.05.8", "cuda": cuda, "arch": "arm64"}
    ]
    path = tmp_path / "versions.yaml"
    path.write_text(dump_yaml(shipped))
    return path


def test_gpu_user_space_pinned_for_amd64_only_is_refused_for_an_arm64_cell(
    tmp_path: Path, shipped: dict
) -> None:
    """NVIDIA publishes no aarch64 wheel of CUDA 12.2's runtime: the shipped 12.2.2 pins amd64's
    alone, and an arm64 cell of it is refused before anything is fetched; its images without
    GPU user space are not."""
    path = _arm64_cell(shipped, tmp_path, "12.2.2")
    cell = ("--config", str(path), "--cell", "24.05.8-cuda12.2.2-debian12-arm64")
    proc = run_invoke("fetch", *cell, "--component", "jail", env=NO_DAEMON)
    assert_clean_failure(
        proc,
        f'{path}: cuda."12.2.2".runtime.wheels[0].sha256: nvidia-cuda-runtime-cu12==12.2.140 is '
        "pinned for amd64 only, and cell 24.05.8-cuda12.2.2-debian12-arm64 is arm64; expected "
        "sha256: {amd64: …, arm64: …}",
    )
    assert "--component slurmd" in proc.stderr and "--component worker" not in proc.stderr
    assert not (tmp_path / ".cache").exists()
    cfg = versions.load(path)
    arm = [c for c in matrix.cells_of(cfg, "default") if c.arch == "arm64"]
    for target in matrix.expand(cfg, "default", arm, ["slurmd"]):
        context.needs(cfg, target)  # no GPU user space, nothing refused


def test_an_amd64_package_in_arm64_gpu_user_space_is_refused(tmp_path: Path, shipped: dict) -> None:
    toolkit = shipped["cuda"]["12.2.2"]["build"]["debs"][0]
    shipped["cuda"]["12.9.1"]["runtime"]["debs"] = [toolkit]
    path = _arm64_cell(shipped, tmp_path, "12.9.1")
    proc = run_invoke("fetch", "--config", str(path), "--cell", "24.05.8-cuda12.9.1-debian12-arm64",
                   "--component", "worker", env=NO_DAEMON)  # fmt: skip
    assert_clean_failure(
        proc,
        f'{path}: cuda."12.9.1".runtime.debs[0]: nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb '
        "is for amd64, and cell 24.05.8-cuda12.9.1-debian12-arm64 is arm64",
    )
