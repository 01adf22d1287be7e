"""The GitHub Actions workflows: actionlint (with shellcheck on every `run:`) passes, and the image
matrix comes from `invoke matrix --set ci`, which yields exactly the cells versions.yaml defines."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.common import ROOT, load_yaml

WORKFLOWS = ROOT / ".github" / "workflows"
BIN = str(Path(sys.executable).parent)


def _actionlint(cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("actionlint", path=BIN) or "actionlint"
    return subprocess.run(
        [exe, "-no-color"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},  # its shellcheck too
        check=False,
    )


def _images() -> dict:
    return load_yaml((WORKFLOWS / "images.yml").read_text())


def test_actionlint_passes() -> None:
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == ["end-to-end.yml", "images.yml"]
    proc = _actionlint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    text = (WORKFLOWS / "images.yml").read_text()
    broken = text.replace("needs.matrix.outputs.cells", "needs.matrix.outputs.cels", 1)
    assert broken != text
    (tmp_path / ".github" / "workflows" / "images.yml").write_text(broken)
    proc = _actionlint(tmp_path)
    assert proc.returncode == 1 and '"cels"' in proc.stdout, proc.stdout


def _matrix_step() -> tuple[str, str, str]:
    """(job, step id, command) of the step that writes the cells to the job's outputs."""
    for name, job in _images()["jobs"].items():
        for step in job.get("steps", []):
            run = step.get("run", "")
            if "invoke matrix" in run and "GITHUB_OUTPUT" in run:
                command = re.search(r"\$\((invoke matrix[^)]*)\)", run)
                assert command, run
                return name, step["id"], command.group(1)
    pytest.fail("no step runs `invoke matrix` into $GITHUB_OUTPUT")


def test_the_build_matrix_comes_from_invoke_matrix() -> None:
    jobs = _images()["jobs"]
    job, step, command = _matrix_step()
    assert shlex.split(command) == ["invoke", "matrix", "--set", "ci", "--format", "github"]
    (output,) = [k for k, v in jobs[job]["outputs"].items() if f"steps.{step}.outputs." in v]
    builders = [
        name
        for name, j in jobs.items()
        if j.get("strategy", {}).get("matrix")
        == f"${{{{ fromJSON(needs.{job}.outputs.{output}) }}}}"
    ]
    assert builders == ["images"]
    build = jobs["images"]
    assert job in build["needs"] and {"lint", "unit"} <= set(build["needs"])
    runs = [s.get("run", "") for s in build["steps"]]
    for task in ("build", "test-images", "push"):
        assert any(f'invoke {task} --set ci --cell "${{{{ matrix.cell }}}}"' in r for r in runs), (
            task
        )
    pushes = [s for s in build["steps"] if "invoke push" in s.get("run", "")]
    assert all(s.get("if") == "github.event_name == 'push'" for s in pushes)
    # after every cell's job: one that joins each arch's pushed image into the set's lists
    lists = jobs["lists"]
    assert set(lists["needs"]) == {job, "images"} and "github.event_name == 'push'" in lists["if"]
    assert any(s.get("run") == "invoke push --set ci --lists" for s in lists["steps"])
    # no cell, version or image is written into the workflow itself
    text = (WORKFLOWS / "images.yml").read_text()
    assert not re.search(r"\b2[34]\.\d\d\.\d+\b|ubuntu22|debian12|ghcr\.io", text)


def test_the_matrix_it_would_run_equals_the_ci_set_of_versions_yaml() -> None:
    _, _, command = _matrix_step()
    argv = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *shlex.split(command)[1:]]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    include = json.loads(out)["include"]
    ci = load_yaml((ROOT / "versions.yaml").read_text())["sets"]["ci"]
    m = ci["matrix"]
    expected = {
        f"{s}-cuda{c}-{d}" for d, s, c in itertools.product(m["distro"], m["slurm"], m["cuda"])
    }
    expected |= {f"{i['slurm']}-cuda{i['cuda']}-{i['distro']}" for i in ci.get("include", [])}
    assert {row["cell"] for row in include} == expected and len(include) == len(expected)
    for row in include:
        assert row["slurmctld"] == f"{ci['registry']}/slurmctld:{row['cell']}"
