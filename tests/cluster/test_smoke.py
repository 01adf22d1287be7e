"""Smoke: slurmctld + two slurmd from the built images run a two-node job.

A throwaway Docker network, a minimal generated slurm.conf and a munge key made here; the full
deployment (jail, login, manifests) is a later stage. This only proves the images work together.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

pytestmark = pytest.mark.cluster

SLURM_CONF = """\
ClusterName=smoke
SlurmctldHost=ctl
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=c[1-2] CPUs=1 RealMemory=256 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
CGROUP_CONF = "CgroupPlugin=disabled\n"


@pytest.fixture
def cluster(
    images: dict[str, str], client: docker.DockerClient, tmp_path: Path
) -> Iterator[dict[str, docker.models.containers.Container]]:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(SLURM_CONF)
    (etc / "cgroup.conf").write_text(CGROUP_CONF)
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    volumes = {
        str(etc): {"bind": "/etc/slurm", "mode": "ro"},
        str(key): {"bind": "/run/secrets/munge.key", "mode": "ro"},
    }
    prefix = f"sf-smoke-{uuid.uuid4().hex[:8]}"
    network = client.networks.create(prefix, driver="bridge")
    nodes: dict[str, docker.models.containers.Container] = {}
    try:
        for name, image in (
            ("ctl", images["slurmctld"]),
            ("c1", images["slurmd"]),
            ("c2", images["slurmd"]),
        ):
            container = client.containers.create(
                image,
                name=f"{prefix}-{name}",
                hostname=name,
                volumes=volumes,
                labels={"io.slurmforge.test": prefix},
            )
            network.connect(container, aliases=[name])
            container.start()
            nodes[name] = container
        yield nodes
    finally:
        for container in nodes.values():
            container.remove(force=True)
        network.remove()


def _sh(container, cmd: str) -> tuple[int, str]:
    code, out = container.exec_run(["bash", "-c", cmd])
    return code, out.decode(errors="replace").strip()


def _logs(nodes) -> str:
    return "\n".join(
        f"--- {n}\n{c.logs(tail=30).decode(errors='replace')}" for n, c in nodes.items()
    )


def test_srun_across_two_nodes(cluster) -> None:
    ctl = cluster["ctl"]
    deadline = time.monotonic() + 120
    states = ""
    while time.monotonic() < deadline:
        code, states = _sh(ctl, "sinfo -h -N -o '%N %t'")
        if code == 0 and states.split() == ["c1", "idle", "c2", "idle"]:
            break
        time.sleep(2)
    else:
        pytest.fail(f"nodes never became idle: {states!r}\n{_logs(cluster)}")
    code, out = _sh(ctl, "timeout 60 srun -N2 hostname")
    assert code == 0, f"{out}\n{_logs(cluster)}"
    assert sorted(out.split()) == ["c1", "c2"]
