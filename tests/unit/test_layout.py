"""The package's shape, as docs/development/layout.md states it: the deploy side's parts import
only the parts above them, no module imports one that imports it back (TYPE_CHECKING imports
and imports inside functions included), and modules and classes stay a screen or a few long."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

from tests.common import ROOT

PACKAGE = ROOT / "slurmforge"
DEPLOY = PACKAGE / "deploy"
# the Layout page's order of the deploy side: a part may import the parts before it
ORDER = [
    "portal_tls", "spec", "identity", "target", "roles", "slurm", "generated", "portal",
    "monitoring", "backup", "loader",
    "__init__", "healthcheck", "replace", "local", "k8s", "commands",
]  # fmt: skip


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """The slurmforge modules ``path`` imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("slurmforge")
        ):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found = (ROOT / Path(*sub.split("."))).with_suffix(".py").exists()
                found = found or (ROOT / Path(*sub.split("."))).is_dir()
                out.add(sub if found else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("slurmforge"))
    return out


def _part(module: str) -> str:
    rest = module.removeprefix("slurmforge.deploy").lstrip(".")
    return rest.split(".")[0] if rest else "__init__"


def test_the_deploy_sides_parts_import_only_the_parts_above_them() -> None:
    wrong = []
    for path in DEPLOY.rglob("*.py"):
        here = _part(_module(path))
        for name in _imports(path):
            inside = name.startswith("slurmforge.deploy") and _part(name) != here
            if inside and ORDER.index(_part(name)) > ORDER.index(here):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, wrong


def test_no_module_imports_one_that_imports_it_back() -> None:
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {
        name: {i for i in _imports(path) if i in modules and i != name}
        for name, path in modules.items()
    }
    # a package's __init__ is imported by its modules' import; that edge is Python's, not ours
    for name in graph:
        graph[name] = {i for i in graph[name] if not name.startswith(i + ".")}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import circle: {' -> '.join(exc.args[1])}")


def test_modules_and_classes_fit_on_a_few_screens() -> None:
    long = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        text = path.read_text()
        if len(text.splitlines()) > 400:
            long.append(f"{rel}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno >= 205:
                long.append(f"{rel}: class {node.name}, {node.end_lineno - node.lineno + 1} lines")
    assert not long, long


def test_test_modules_hold_tests_and_conftest_files_hold_fixtures() -> None:
    """What tests share lives in helper modules (tests/common.py, tests/cluster/deployed.py,
    tests/k8s/kube.py, ...): no module imports a test module or a conftest.py, whose names pytest
    may load twice under two module names."""
    wrong = []
    for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            leaves = {n.rsplit(".", 1)[-1] for n in names if n.startswith(("tests", "bench"))}
            if any(leaf.startswith("test_") or leaf == "conftest" for leaf in leaves):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not wrong, wrong
