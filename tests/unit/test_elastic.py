"""Elastic node sets (nodesets[].elastic): what the cluster file may say, and what slurm.conf,
slurmctld's power programs and the Compose file make of it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurmforge import config
from slurmforge.deploy import loader, roles
from slurmforge.deploy.local import render
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.versions import load as load_versions
from tests.common import ROOT
from tests.unit.helpers import assert_clean_failure, run_invoke, secret_files, shipped_with

CPU = {"name": "cpu", "definitions": ["cpu-small"], "replicas": 2}


def _burst(**elastic) -> dict:
    return {"name": "burst", "definitions": ["cpu-small"], "elastic": {"max": 4, **elastic}}


def _data(*nodesets: dict, partitions: list | None = None) -> dict:
    parts = partitions or [
        {"name": "main", "nodesets": ["cpu"], "default": True},
        {"name": "burst", "nodesets": [ns["name"] for ns in nodesets if "elastic" in ns]},
    ]
    return shipped_with(nodesets=[CPU, *nodesets], partitions=parts)


@pytest.fixture(scope="module")
def versions() -> config.Config:
    return load_versions(ROOT / "versions.yaml")


def _conf(cluster) -> list[str]:
    return slurmconf.render(cluster)["slurm.conf"].splitlines()


def test_an_elastic_set_is_cloud_nodes_its_partition_stops_and_slurm_starts(
    write_cluster, versions
) -> None:
    cluster = loader.load(
        write_cluster(_data(_burst(min=1, idle="2m", start_timeout=90))), versions
    )
    conf = _conf(cluster)
    nodes = [line.split()[0:1] + [w for w in line.split() if w.startswith("State=")]
             for line in conf if line.startswith("NodeName=")]  # fmt: skip
    assert nodes == [
        ["NodeName=cpu-[0-1]", "State=UNKNOWN"],
        ["NodeName=burst-0", "State=UNKNOWN"],  # min: 1 always runs
        ["NodeName=burst-[1-3]", "State=CLOUD"],
    ]
    burst = next(line for line in conf if line.startswith("PartitionName=burst "))
    assert "SuspendTime=120" in burst.split() and "ResumeTimeout=90" in burst.split()
    main = next(line for line in conf if line.startswith("PartitionName=main "))
    assert "SuspendTime" not in main and "ResumeTimeout" not in main
    for line in (
        "ResumeProgram=/etc/slurm/power-resume",
        "SuspendProgram=/etc/slurm/power-suspend",
        "ResumeFailProgram=/etc/slurm/power-suspend",  # a start given up on is withdrawn
        "SuspendTime=INFINITE",  # only the elastic sets' partitions stop idle nodes
        "SuspendExcNodes=cpu-[0-1],burst-0",  # and these never
        "SlurmctldParameters=cloud_dns",
    ):
        assert line in conf, line
    # what the deploy starts and waits for, and the size a scale override cannot change
    assert [node for _, node in cluster.fixed_nodes] == ["cpu-0", "cpu-1", "burst-0"]
    assert [node for _, node in cluster.nodes][-3:] == ["burst-1", "burst-2", "burst-3"]


def test_no_elastic_set_no_power_saving(write_cluster, versions) -> None:
    conf = _conf(loader.load(write_cluster(shipped_with()), versions))
    assert not [ln for ln in conf if ln.startswith(("Resume", "Suspend", "SlurmctldParameters"))]
    assert "power-resume" not in slurmconf.render(loader.load(write_cluster(shipped_with()),
                                                               versions))  # fmt: skip


def test_the_power_programs_leave_one_whole_request_per_node(
    write_cluster, versions, tmp_path: Path
) -> None:
    """slurmctld runs power-resume (power-suspend) with a host list; each node becomes a file
    of the agent's request directory that says what is wanted."""
    files = slurmconf.render(loader.load(write_cluster(_data(_burst())), versions))
    spool = tmp_path / "spool"
    spool.mkdir()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    # scontrol's own expansion of a host list, for the two this test gives
    fake = {"burst-[1-2]": "burst-1\nburst-2", "burst-3": "burst-3", "burst-1": "burst-1"}
    scontrol = "\n".join(
        ["#!/bin/bash", 'case "$3" in']
        + [f"  '{k}') printf '{v}\\n';;" for k, v in fake.items()]
        + ["esac"]
    )
    (bin_ / "scontrol").write_text(scontrol + "\n")
    (bin_ / "scontrol").chmod(0o755)
    for action in ("resume", "suspend"):
        text = files[f"power-{action}"].replace("/run/slurmforge/power", str(spool))
        (tmp_path / f"power-{action}").write_text(text)
        (tmp_path / f"power-{action}").chmod(0o755)
    env = {"PATH": f"{bin_}:/usr/bin:/bin"}
    subprocess.run([tmp_path / "power-resume", "burst-[1-2]"], env=env, check=True)
    subprocess.run([tmp_path / "power-suspend", "burst-3"], env=env, check=True)
    subprocess.run([tmp_path / "power-suspend", "burst-1"], env=env, check=True)  # the latest
    assert {p.name: p.read_text() for p in spool.iterdir()} == {
        "burst-1": "suspend\n",
        "burst-2": "resume\n",
        "burst-3": "suspend\n",
    }


def test_the_compose_file_makes_every_node_and_an_agent_alone_holds_the_engine(
    write_cluster, versions, tmp_path: Path
) -> None:
    cluster = loader.load(write_cluster(_data(_burst())), versions)
    services = render.render(cluster, secret_files(tmp_path), "sha256:0")["services"]
    assert {"burst-0", "burst-3"} <= set(services)  # made at deploy, started by Slurm
    # each start is the node's boot to Slurm, which waits for one after it asked for a resume
    assert services["burst-0"]["command"] == ["slurmd", "-D", "-N", "burst-0", "-b"]
    assert services["cpu-0"]["command"] == ["slurmd", "-D", "-N", "cpu-0"]
    # a deploy brings up the nodes that always run, and the agent, before slurmctld; not the
    # elastic ones
    first = render.started_before(cluster, roles.CONTROLLER)
    assert "burst-0" not in first and {"cpu-0", "node-power"} <= set(first)
    socket = "/var/run/docker.sock:/var/run/docker.sock"
    holding = [name for name, s in services.items() if socket in s.get("volumes", [])]
    assert holding == ["node-power"]
    agent = services["node-power"]
    assert agent["cap_drop"] == ["ALL"] and agent["cap_add"] == ["CHOWN", "DAC_OVERRIDE"]
    assert "no-new-privileges:true" in agent["security_opt"]
    assert agent["environment"]["NODE_POWER_NODES"] == "burst-0,burst-1,burst-2,burst-3"
    assert "power:/run/slurmforge/power" in services["slurmctld"]["volumes"]
    assert "power:/run/slurmforge/power" in agent["volumes"]


def test_without_elastic_sets_there_is_no_agent(write_cluster, versions, tmp_path) -> None:
    cluster = loader.load(write_cluster(shipped_with()), versions)
    data = render.render(cluster, secret_files(tmp_path), "sha256:0")
    assert "node-power" not in data["services"] and "power" not in data["volumes"]


@pytest.mark.parametrize(
    ("nodeset", "expected"),
    [
        (_burst(min=5), "nodesets[1].elastic.min: 5 is more than elastic.max (4)"),
        (_burst(max=0), "nodesets[1].elastic.max: Input should be greater than or equal to 1"),
        ({**_burst(), "elastic": {"min": 1}}, "nodesets[1].elastic.max: required key is missing"),
        (_burst(idle="5 minutes"), "nodesets[1].elastic.idle: expected a duration such as 90s"),
        (_burst(idle="10s"), "nodesets[1].elastic.idle: Input should be greater than or equal"),
        (_burst(idle=True), "nodesets[1].elastic.idle: input should be a valid integer"),
        ({**_burst(), "replicas": 4}, "nodesets[1]: replicas: an elastic node set has elastic"),
        (_burst(spare=1), "nodesets[1].elastic.spare: unknown key"),
    ],
)
def test_bad_elastic_settings_are_refused_in_one_line(write_cluster, nodeset, expected) -> None:
    path = write_cluster(_data(nodeset))
    proc = run_invoke("deploy", "--dry-run", "--cluster", str(path))
    assert_clean_failure(proc, f"{path}: {expected}")


def test_two_idle_times_in_one_partition_are_refused(write_cluster) -> None:
    other = {**_burst(idle="10m"), "name": "more"}
    parts = [{"name": "main", "nodesets": ["cpu", "burst", "more"], "default": True}]
    path = write_cluster(_data(_burst(), other, partitions=parts))
    proc = run_invoke("deploy", "--dry-run", "--cluster", str(path))
    assert_clean_failure(proc, f"{path}: partitions[0].nodesets: elastic node sets with different")


def test_durations_read_as_seconds(write_cluster, versions) -> None:
    for written, seconds in (("90s", 90), ("5m", 300), ("1h30m", 5400), (45, 45)):
        path = write_cluster(_data(_burst(idle=written)))
        assert loader.load(path, versions).nodeset("burst").elastic.idle == seconds


def test_scale_refuses_an_elastic_set_and_its_size_ignores_a_kept_count(
    write_cluster, versions
) -> None:
    path = write_cluster(_data(_burst()))
    proc = run_invoke("scale", "burst=2", "--cluster", str(path))
    assert_clean_failure(proc, "scale 'burst=2': node set burst is elastic")
    # a count kept from before the set was made elastic is not its size
    assert loader.load(path, versions, {"burst": 1, "cpu": 3}).nodeset("burst").replicas == 4
