"""The benchmarks' own plumbing: a cluster of theirs runs beside README's (every port it
publishes a free one), and a failing `invoke` says why in the benchmark's error."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import b7_jobs, b8_k8s
from bench.common import InvokeFailed, free_ports, invoke
from tests.common import load_yaml

README_PORTS = {2222, 6820, 9090}  # what README's cluster publishes on 127.0.0.1


def _published(data: dict) -> set[int]:
    return {data["login"]["port"], data["rest"]["port"], data["metrics"]["prometheus"]["port"]}


def test_a_benchmarks_cluster_publishes_no_port_readmes_cluster_takes(tmp_path: Path) -> None:
    shipped = load_yaml((Path(__file__).parents[2] / "deploy/cluster.yaml").read_text())
    (tmp_path / "b7").mkdir()  # as b7's own temporary directory
    files = [
        b7_jobs.cluster_file(tmp_path / "b7", "sfb7"),
        b8_k8s.cluster_file(tmp_path / "b8", "sfb8"),
    ]
    for data in [free_ports(shipped), *(load_yaml(f.read_text()) for f in files)]:
        ports = _published(data)
        assert len(ports) == 3 and not ports & README_PORTS, ports


def test_free_ports_keeps_the_rest_of_each_setting() -> None:
    data = free_ports({"rest": {"enabled": False}, "metrics": {"prometheus": {"enabled": False}}})
    assert data["rest"]["enabled"] is False
    assert data["metrics"]["prometheus"]["enabled"] is False


def test_a_failing_invoke_shows_its_error_and_hint(tmp_path: Path) -> None:
    with pytest.raises(InvokeFailed) as failed:
        invoke("deploy", "--cluster", str(tmp_path / "nowhere.yaml"), "--out", str(tmp_path))
    assert "exited 2" in str(failed.value)
    assert "error: " in str(failed.value) and "nowhere.yaml" in str(failed.value)
