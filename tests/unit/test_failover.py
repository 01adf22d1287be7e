"""controller.replicas: 2 — a backup slurmctld on the primary's StateSaveLocation: what the
cluster file may say, and what the Slurm config and the Compose file make of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge import config
from slurmforge.deploy import loader
from slurmforge.deploy.k8s.run import Kube
from slurmforge.deploy.local import render as local_render
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.conftest import ROOT
from tests.unit.helpers import assert_clean_failure, run_invoke, secret_files, shipped_with
from tests.unit.kube import cluster_data


@pytest.fixture(scope="module")
def versions() -> config.Config:
    return load_versions(ROOT / "versions.yaml")


def _conf(cluster) -> list[str]:
    return slurmconf.render(cluster)["slurm.conf"].splitlines()


def test_one_controller_is_the_default_and_its_config_is_as_before(write_cluster, versions):
    conf = _conf(loader.load(write_cluster(shipped_with()), versions))
    assert [line for line in conf if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=slurmctld"
    ]
    assert not [line for line in conf if line.startswith("SlurmctldTimeout")]


def test_a_backup_is_the_second_controller_slurm_conf_names(write_cluster, versions) -> None:
    data = shipped_with(controller={"replicas": 2, "failover_after": 15})
    conf = _conf(loader.load(write_cluster(data), versions))
    hosts = [line for line in conf if line.startswith("SlurmctldHost=")]
    assert hosts == ["SlurmctldHost=slurmctld", "SlurmctldHost=slurmctld-backup"]
    assert "SlurmctldTimeout=15" in conf


def test_both_controllers_share_the_state_volume_and_every_secret(
    write_cluster, versions, tmp_path: Path
) -> None:
    cluster = loader.load(write_cluster(shipped_with(controller={"replicas": 2})), versions)
    services = local_render.render(cluster, secret_files(tmp_path), "sha256:0")["services"]
    primary, backup = services["slurmctld"], services["slurmctld-backup"]
    # slurmctld knows which SlurmctldHost it is by its host name
    assert (primary["hostname"], backup["hostname"]) == ("slurmctld", "slurmctld-backup")
    assert backup["volumes"] == primary["volumes"]
    assert "state:/var/spool/slurmctld" in backup["volumes"]
    assert backup["image"] == primary["image"] and backup["command"] == primary["command"]
    # what waits for the controller waits for both
    assert {"slurmctld", "slurmctld-backup"} <= set(services["login"]["depends_on"])


@pytest.mark.parametrize(
    ("controller", "expected"),
    [
        ({"replicas": 3}, "controller.replicas: Input should be less than or equal to 2"),
        ({"replicas": 0}, "controller.replicas: Input should be greater than or equal to 1"),
        ({"replicas": "2"}, "controller.replicas: input should be a valid integer, got str"),
        ({"failover_after": 1}, "controller.failover_after: Input should be greater than"),
        ({"failover_after": "10s"}, "controller.failover_after: input should be a valid integer"),
        ({"backups": 1}, "controller.backups"),
    ],
)
def test_bad_controller_settings_are_refused_in_one_line(
    write_cluster, controller: dict, expected: str
) -> None:
    path = write_cluster(shipped_with(controller=controller))
    proc = run_invoke("deploy", "--dry-run", "--cluster", str(path))
    assert_clean_failure(proc, f"{path}: {expected}")


def test_the_k8s_target_refuses_a_backup_controller_before_writing(write_cluster, tmp_path):
    versions = load_versions(ROOT / "versions.yaml")
    data = {**cluster_data(), "controller": {"replicas": 2}}
    cluster = loader.load(write_cluster(data), versions)
    with pytest.raises(ConfigError, match=r"controller\.replicas: a backup slurmctld runs on"):
        Kube(cluster, tmp_path / "out", tmp_path).manifests.write()
    assert not (tmp_path / "out").exists()
