"""The one edit slurmforge makes to Slurm's source (images/slurm-debs/epilog-in-jail), run here on
the real slurmstepd of every Slurm release versions.yaml takes from upstream's git (through the
mirror): it lands once, in the child that runs a user's task epilog, before the script is
executed and after the child joined the job's container; a tree it does not fit is refused."""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import pytest

from tests.common import ROOT, load_yaml, slurm_files

EDIT = ROOT / "images" / "slurm-debs" / "epilog-in-jail"
MGR = "src/slurmd/slurmstepd/mgr.c"
TAGS = sorted(
    source["tag"]
    for release in load_yaml((ROOT / "versions.yaml").read_text())["slurm"].values()
    for source in release["sources"]
    if "tag" in source
)


def _tree(tmp_path: Path, tag: str) -> Path:
    return slurm_files(tag, (MGR,), tmp_path / tag)


def _edit(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(EDIT), str(tree)], capture_output=True, text=True)


def _definition(source: str) -> str:
    """_run_script_as_user's body: its definition is the last place its name and first parameter
    appear (its prototype comes first), and ends at the next closing brace in column 0."""
    start = source.rindex("_run_script_as_user(const char *name")
    return source[start : source.index("\n}\n", start)]


def test_every_git_release_of_the_matrix_is_there() -> None:
    assert len(TAGS) >= 4, TAGS


@pytest.mark.parametrize("tag", TAGS)
def test_the_edit_lands_once_in_the_task_epilogs_child(tmp_path: Path, tag: str) -> None:
    tree = _tree(tmp_path, tag)
    before = (tree / MGR).read_text()
    proc = _edit(tree)
    assert proc.returncode == 0, proc.stderr
    after = (tree / MGR).read_text()
    # one block inserted, nothing else changed
    changes = [
        op
        for op in difflib.SequenceMatcher(
            None, before.splitlines(), after.splitlines()
        ).get_opcodes()
        if op[0] != "equal"
    ]
    assert [op[0] for op in changes] == ["insert"], changes
    added = after.splitlines()[changes[0][3] : changes[0][4]]
    assert any('strcmp(name, "user task_epilog")' in line for line in added), added
    body = _definition(after)
    hook = body.index("spank_task_privileged(step, -1)")
    # after the child joins the job's container (renamed namespace_g_join in 25.11), before it
    # drops privileges and before the script is executed
    join = max(body.find("container_g_join("), body.find("namespace_g_join("))
    assert 0 <= join < hook < body.index("drop_privileges(") < body.index("execve(path")
    # made once: a second run changes nothing
    assert _edit(tree).returncode == 0
    assert (tree / MGR).read_text() == after


def test_a_tree_it_does_not_fit_is_refused_and_left_alone(tmp_path: Path) -> None:
    mgr = tmp_path / MGR
    mgr.parent.mkdir(parents=True)
    text = "static int _run_script_as_user(void)\n{\n\treturn 0;\n}\n"
    mgr.write_text(text)
    proc = _edit(tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"epilog-in-jail: {mgr}: expected one 'argv[0] = (char *)xstrdup(path);' "
        "(the task epilog's exec), found 0"
    )
    assert mgr.read_text() == text
