"""The Docker tiers take no fixed host port: a cluster they deploy publishes only free ports
(tests/ports.py), so the suite passes beside the cluster README's first command leaves running
(login 2222, REST 6820, Prometheus 9090) and beside another run of itself. Read from the
tiers' source, as a reviewer would grep it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.common import ROOT

TIERS = ("build", "cluster", "image", "k8s", "registry")
YAML_PORT = re.compile(r"^\s*port:\s*[0-9]+\s*$", re.M)  # a line of a YAML file


def _sources() -> list[Path]:
    helpers = [p for p in (ROOT / "tests").glob("*.py")]
    return sorted(helpers + [p for t in TIERS for p in (ROOT / "tests" / t).rglob("*.py")])


def _fixed(node: ast.expr) -> bool:
    """A number written in the source (or arithmetic on one), not a port asked of the kernel."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | str)
    return isinstance(node, ast.BinOp)


def problems(source: str, name: str) -> list[str]:
    """Where ``source`` publishes a fixed port or writes a cluster file without free ones."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            pairs = list(zip(node.keys, node.values, strict=True))
            keys = {k.value: v for k, v in pairs if isinstance(k, ast.Constant)}
            if "port" in keys and _fixed(keys["port"]):
                found.append(f"{name}:{node.lineno}: a fixed port")
            spreads = [v for k, v in pairs if k is None]
            free = any(
                isinstance(v, ast.Call) and getattr(v.func, "id", "") == "published"
                for v in spreads
            )
            # a whole cluster file (a partition or switch has a name and node sets too)
            if {"name", "nodesets", "partitions"} <= keys.keys() and not free:
                found.append(f"{name}:{node.lineno}: a cluster file without **published()")
        elif isinstance(node, ast.Constant) and YAML_PORT.search(str(node.value)):
            found.append(f"{name}:{node.lineno}: a fixed port in YAML text")
    return found


def test_no_docker_tier_publishes_a_fixed_port() -> None:
    sources = _sources()
    assert len(sources) > 20  # the tiers are where this test looks
    found = [p for path in sources for p in problems(path.read_text(), path.name)]
    assert not found, "\n".join(found)


def test_the_check_finds_what_broke_the_suite_beside_the_shipped_cluster() -> None:
    """The site-layer test's cluster as it was: a port from the pid, and Prometheus (which the
    file did not mention) on its default 9090."""
    before = """
cluster.write_text(dump_yaml({
    "name": name,
    "login": {"address": "127.0.0.1", "port": 20000 + os.getpid() % 20000},
    "nodesets": [],
    "partitions": [],
}))
"""
    assert problems(before, "t.py") == [
        "t.py:2: a cluster file without **published()",
        "t.py:4: a fixed port",
    ]
    assert problems('write("login:\\n  port: 2222\\n")', "t.py") == [
        "t.py:1: a fixed port in YAML text"
    ]
    after = 'dump({"name": name, **published(), "nodesets": [], "partitions": []})'
    assert problems(after, "t.py") == []
