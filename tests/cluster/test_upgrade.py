"""Upgrading a running cluster to the next Slurm series, as Slurm documents it: a 24.05.8 cluster
with accounting, a user, her files and her jobs is redeployed on a 25.11.7 cell. Its jobs' records,
StateSave (job IDs go on), users and homes survive; a job that runs when the upgrade starts ends
normally, and a job still pending runs afterwards; the exporter's scheduler statistics move from
sdiag to 25.11's own metrics endpoint; an elastic node set keeps starting nodes (the one that ran
comes back on the new series, and a job starts another there). Upgrades Slurm cannot make are
refused before anything changes.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from slurmforge.deploy.backup import archive
from tests.cluster.deployed import Clusters, Deployed
from tests.cluster.helpers import FROM, TO
from tests.cluster.promql import until as until_prometheus
from tests.common import build, dump_yaml, load_yaml, select

TOO_FAR = ("current", "26.05.3-cuda12.2.2-debian12")
USER = "ada"
# the exporter's scheduler series are there, and say which source they came from
SCHEDULER_FROM = (
    'slurm_scheduler_cycles_total > 0 and on() slurm_scheduler_source{{source="{source}"}}'
)


@pytest.fixture(scope="module")
def old(clusters: Clusters) -> Deployed:
    for set_name, cell in (FROM, TO):
        build(select(set_name, (cell,)))
    images = {"set": FROM[0], "cell": FROM[1]}
    # beside the fixed nodes, an elastic set whose started nodes stay up through the test
    burst = {"name": "burst", "definitions": ["cpu-small"],
             "elastic": {"max": 2, "idle": 900, "start_timeout": 120}}  # fmt: skip
    partitions = [{"name": "main", "nodesets": ["cpu"], "default": True},
                  {"name": "burst", "nodesets": ["burst"]}]  # fmt: skip
    nodesets = [{"name": "cpu", "definitions": ["cpu-small"], "replicas": 2}, burst]
    # no PrivateData: Slurm serves its metrics endpoint only then, and the exporter's switch to
    # it on 25.11 is part of what this test follows
    return clusters.deploy(
        "sfupg",
        clusters.root("upgrade"),
        images=images,
        nodesets=nodesets,
        partitions=partitions,
        slurm={"private_data": []},
    )


def _use(cluster: Deployed, cell: tuple[str, str]) -> None:
    data = load_yaml(cluster.cluster_file.read_text())
    data["images"] = {"set": cell[0], "cell": cell[1]}
    cluster.cluster_file.write_text(dump_yaml(data, sort_keys=False))


def _version(cluster: Deployed) -> str:
    return cluster.ok("slurmctld", "scontrol version").split()[-1]


def _states(cluster: Deployed, jobs: list[str]) -> dict[str, str]:
    out = cluster.ok("slurmctld", f"sacct -n -X -P -j {','.join(jobs)} -o JobID,State")
    return dict(line.split("|") for line in out.splitlines())


def _queued(cluster: Deployed, jobs: list[str]) -> dict[str, str]:
    """What slurmctld says of jobs it still holds (sacct learns of a pending job later)."""
    out = cluster.ok("slurmctld", f"squeue -h -j {','.join(jobs)} -o '%i|%T'")
    return dict(line.split("|") for line in out.splitlines())


def _until(cluster: Deployed, jobs: list[str], want: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (got := _states(cluster, jobs)) != {j: want for j in jobs}:
        assert time.monotonic() < deadline, f"jobs {jobs}: wanted {want}, sacct says {got}"
        time.sleep(2)


def _submit(cluster: Deployed, *args: str) -> str:
    line = " ".join(("sbatch", "--parsable", *args))
    return cluster.ok("login", f"cd && {line}", user=USER)


def test_a_running_cluster_moves_to_the_next_series_and_loses_nothing(old: Deployed) -> None:
    cluster = old
    assert _version(cluster) == "24.05.8"
    cluster.user(USER)
    cluster.ok("login", "echo kept > ~/data.txt", user=USER)
    done = _submit(cluster, "--wrap", "'hostname'")
    elastic = _submit(cluster, "-p", "burst", "--wrap", "'hostname'")  # starts burst-0
    _until(cluster, [done, elastic], "COMPLETED")
    assert cluster.states()["burst-1"] == "idle~"
    # before 25.11 the scheduler's statistics come from sdiag
    until_prometheus(cluster, SCHEDULER_FROM.format(source="sdiag"), bool, 60)
    # one job holds both nodes while the upgrade starts; the next one waits for them
    running = _submit(cluster, "-N2", "--exclusive", "--wrap", "'sleep 20'")
    _until(cluster, [running], "RUNNING")
    pending = _submit(cluster, "-N1", "--wrap", "'cat ~/data.txt > ~/after.txt'")
    assert _queued(cluster, [pending]) == {pending: "PENDING"}

    # three releases on (24.05 → 26.05) is further than Slurm goes: refused, nothing touched
    _use(cluster, TOO_FAR)
    proc = cluster.invoke("deploy")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    error = proc.stderr.strip().splitlines()[0]
    assert error.startswith(f"error: {cluster.cluster_file}: images: cluster {cluster.name} runs ")
    assert "Slurm 26.05 upgrades only from 24.11, 25.05, 25.11" in error
    assert "Traceback" not in proc.stderr
    assert _version(cluster) == "24.05.8"
    assert _queued(cluster, [running, pending]) == {running: "RUNNING", pending: "PENDING"}

    _use(cluster, TO)
    proc = cluster.invoke("deploy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _version(cluster) == "25.11.7"
    # it backed the cluster up first, as Slurm's upgrade guide asks
    match = re.search(r"^backup before the upgrade: (\S+) ", proc.stderr, re.M)
    assert match, proc.stderr
    backup = Path(match.group(1))
    assert archive.verify(backup).slurm == "24.05.8"
    # every job of before: the finished one's record converted, the running one ended on its
    # own, the pending one ran on the upgraded nodes with the user's file
    _until(cluster, [done, running, pending], "COMPLETED")
    assert cluster.ok("login", "cat ~/after.txt", user=USER) == "kept"
    # StateSave came along: job IDs go on from where they were
    after = _submit(cluster, "--wrap", "'true'")
    assert int(after) > int(pending)
    _until(cluster, [after], "COMPLETED")
    # the elastic node that ran came back on 25.11 (Slurm has it up); a job that needs two
    # starts the other on 25.11's image, through the node-power agent the upgrade made again
    assert cluster.states()["burst-1"] == "idle~"
    both = _submit(cluster, "-p", "burst", "-N2", "--wrap", "'srun true'")
    _until(cluster, [both], "COMPLETED", timeout=240)
    for node in cluster.states():
        assert cluster.ok(node, "slurmd -V") == "slurm 25.11.7", node
    # 25.11's slurmctld serves them itself, and the exporter now reads them there
    until_prometheus(cluster, SCHEDULER_FROM.format(source="metrics-endpoint"), bool, 60)

    # back down is refused: the database and StateSave are 25.11's now
    _use(cluster, FROM)
    proc = cluster.invoke("deploy")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Slurm cannot go back to 24.05.8" in proc.stderr
    assert _version(cluster) == "25.11.7"

    # the backup taken before the upgrade brings back the cluster of before, on 24.05.8
    proc = cluster.invoke("restore", str(backup), "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _version(cluster) == "24.05.8"
    assert _states(cluster, [done]) == {done: "COMPLETED"}
    assert cluster.ok("login", "cat ~/data.txt", user=USER) == "kept"
    # what happened after the backup is not there: the job submitted on 25.11 is unknown
    assert not cluster.ok("slurmctld", f"sacct -n -X -j {after} -o JobID")
    # burst-0 ran when that backup was taken: it runs again; burst-1 waits for a job
    states = cluster.states()
    assert states["burst-1"] == "idle~", states
    for node in (n for n, state in states.items() if not state.endswith("~")):
        assert cluster.ok(node, "slurmd -V") == "slurm 24.05.8", node
