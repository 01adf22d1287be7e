"""The node health check's keys (``health:``): what they write beside slurm.conf and into it,
and the input refused before anything is written (tests/cluster/test_health.py runs the checker
on a cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge.deploy import loader
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.common import ROOT
from tests.unit.helpers import assert_dry_run_refused, shipped_with


def load(write_cluster, **changes) -> Cluster:
    return loader.load(
        write_cluster(shipped_with(**changes)), load_versions(ROOT / "versions.yaml")
    )


def conf_lines(cluster: Cluster) -> list[str]:
    return slurmconf.render(cluster)["slurm.conf"].splitlines()


def test_every_node_checks_itself_by_default(write_cluster) -> None:
    files = slurmconf.render(load(write_cluster))
    lines = files["slurm.conf"].splitlines()
    assert "HealthCheckProgram=/usr/lib/slurmforge/node-health" in lines
    assert "HealthCheckInterval=60" in lines
    assert "HealthCheckNodeState=ANY" in lines
    settings = files["health.conf"].splitlines()[1:]
    assert settings == ["max_used_percent=95", "resources=1", "min_driver=525.60.13"]


def test_the_keys_set_the_interval_states_and_thresholds(write_cluster) -> None:
    health = {
        "interval": "2m",
        "node_states": ["idle", "cycle"],
        "max_used_percent": 80,
        "resources": False,
        "min_driver": "550.54",
    }
    files = slurmconf.render(load(write_cluster, health=health))
    lines = files["slurm.conf"].splitlines()
    assert "HealthCheckInterval=120" in lines
    assert "HealthCheckNodeState=IDLE,CYCLE" in lines
    assert files["health.conf"].splitlines()[1:] == [
        "max_used_percent=80",
        "resources=0",
        "min_driver=550.54",
    ]


def test_off_writes_none_of_it(write_cluster) -> None:
    files = slurmconf.render(load(write_cluster, health={"enabled": False}))
    assert not any(line.startswith("HealthCheck") for line in files["slurm.conf"].splitlines())
    assert "health.conf" not in files


def test_the_sites_checks_are_written_in_name_order_as_programs(
    write_cluster, tmp_path: Path
) -> None:
    checks = tmp_path / "health.d"
    checks.mkdir()
    for name in ("fabric", "10-disk.sh", "beegfs"):
        (checks / name).write_text(f"#!/bin/sh\necho {name}\n")
    cluster = load(write_cluster, health={"checks": "health.d"})
    files = slurmconf.render(cluster)
    assert sorted(n for n in files if n.startswith("health-")) == [
        "health-00-10-disk.sh",
        "health-01-beegfs",
        "health-02-fabric",
    ]
    node_dir, jail_dir = tmp_path / "etc", tmp_path / "jail"
    slurmconf.write(cluster, node_dir, jail_dir)
    assert (node_dir / "health-02-fabric").stat().st_mode & 0o777 == 0o755
    assert (node_dir / "health.conf").stat().st_mode & 0o777 == 0o644
    assert not (jail_dir / "health-02-fabric").exists()  # the nodes' alone, never the jail's
    # a check taken out of the directory is gone from the nodes at the next write
    (checks / "beegfs").unlink()
    slurmconf.write(load(write_cluster, health={"checks": "health.d"}), node_dir, jail_dir)
    assert sorted(p.name for p in node_dir.glob("health-*")) == [
        "health-00-10-disk.sh",
        "health-01-fabric",
    ]


@pytest.mark.parametrize(
    ("health", "said"),
    [
        ({"checks": "missing"}, r"health\.checks: expected a directory next to the cluster file"),
        ({"checks": "../elsewhere"}, r"health\.checks: expected a directory next to the cluster"),
        ({"checks": "plain"}, r"health\.checks: plain\.txt: expected a script of at most 1 MiB"),
        ({"checks": "named"}, r"health\.checks: 'a check': expected script files named with"),
        ({"interval": "5x"}, r"health\.interval"),
        ({"interval": 2}, r"health\.interval"),
        ({"node_states": ["busy"]}, r"health\.node_states\[0\]: Input should be .any."),
        ({"node_states": []}, r"health\.node_states"),
        ({"max_used_percent": 101}, r"health\.max_used_percent"),
        ({"min_driver": "latest"}, r"health\.min_driver"),
    ],
)
def test_bad_health_input_is_refused_when_the_file_is_read(
    write_cluster, tmp_path: Path, health, said
) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "plain.txt").write_text("echo no interpreter line\n")
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "a check").write_text("#!/bin/sh\n")
    with pytest.raises(ConfigError, match=said):
        load(write_cluster, health=health)


def test_a_missing_check_directory_fails_deploy_in_one_line_and_writes_nothing(
    write_cluster, tmp_path: Path
) -> None:
    path = write_cluster(shipped_with(health={"checks": "health.d"}))
    assert_dry_run_refused(path, tmp_path / "out", f"{path}: health.checks: expected a directory")
