"""The planned-disruption keys (``disruption:``): what a deploy that replaces nodes takes from
them, and the input refused before anything is written (tests/cluster/test_node_loss.py replaces
a running cluster's nodes under its jobs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge.deploy import loader
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.common import ROOT
from tests.unit.helpers import assert_dry_run_refused, shipped_with
from tests.unit.kube import rendered_kube


def load(write_cluster, **changes):
    return loader.load(
        write_cluster(shipped_with(**changes)), load_versions(ROOT / "versions.yaml")
    )


def test_nodes_are_taken_one_at_a_time_after_ten_minutes_by_default(write_cluster) -> None:
    plan = load(write_cluster).spec.disruption
    assert (plan.max_unavailable, plan.max_wait) == (1, 600)


def test_a_wait_is_a_duration(write_cluster) -> None:
    plan = load(write_cluster, disruption={"max_wait": "1h30m", "max_unavailable": 4})
    assert (plan.spec.disruption.max_unavailable, plan.spec.disruption.max_wait) == (4, 5400)
    assert load(write_cluster, disruption={"max_wait": 0}).spec.disruption.max_wait == 0


@pytest.mark.parametrize(
    ("disruption", "said"),
    [
        ({"max_wait": "soon"}, r"disruption\.max_wait: .*expected a duration such as 90s"),
        ({"max_wait": "8d"}, r"disruption\.max_wait: .*expected a duration"),
        ({"max_wait": -1}, r"disruption\.max_wait"),
        ({"max_unavailable": 0}, r"disruption\.max_unavailable"),
        ({"max_surge": 1}, r"disruption\.max_surge"),
    ],
)
def test_bad_disruption_input_is_refused_when_the_file_is_read(
    write_cluster, disruption, said
) -> None:
    with pytest.raises(ConfigError, match=said):
        load(write_cluster, disruption=disruption)


def test_a_wait_that_is_not_a_duration_fails_deploy_in_one_line_and_writes_nothing(
    write_cluster, tmp_path: Path
) -> None:
    path = write_cluster(shipped_with(disruption={"max_wait": "an hour"}))
    said = assert_dry_run_refused(path, tmp_path / "out", f"{path}: disruption.max_wait:")
    assert "expected a duration such as 90s, 5m or 1h30m" in said


def test_on_kubernetes_only_a_deploy_replaces_node_pods(checkout) -> None:
    """A node set's StatefulSet replaces no pod by itself when its template changes (k8s/roll.py
    does it after their jobs); every other workload rolls as Kubernetes rolls it."""
    kube = rendered_kube(*checkout)
    for obj in kube.manifests.objects.values():
        if obj["kind"] != "StatefulSet":
            continue
        strategy = obj["spec"].get("updateStrategy")
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] == "node":
            assert strategy == {"type": "OnDelete"}, obj["metadata"]["name"]
        else:
            assert strategy is None, obj["metadata"]["name"]
