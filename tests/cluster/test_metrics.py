"""What an operator watching the cluster through Prometheus sees: the real Prometheus of the
local target, scraping the exporter, answers PromQL about a drained node and the jobs within two
scrape intervals; the series come back after the exporter or slurmctld restarts, and a stopped
slurmctld is a `slurm_up` of 0 from an exporter that still answers. Each shipped dashboard's
queries parse in that Prometheus and name only series a scrape declares."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.cluster.conftest import Deployed
from tests.cluster.promql import api, query, settings, until
from tests.conftest import ROOT

pytestmark = pytest.mark.cluster

USER = "metricsuser"
METRIC = re.compile(r"\b(slurm_[a-zA-Z0-9_]+)\b(?!\s*\()")  # a series name, not a function


def _jobs(result: dict) -> dict[str, float]:
    return {dict(labels)["state"]: value for labels, value in result.items()}


def test_prometheus_sees_a_drained_node_and_the_jobs(deployed: Deployed) -> None:
    interval = settings(deployed)["scrape_interval"]
    until(deployed, 'up{job="slurm"} == 1', bool, 60)  # the exporter is scraped at all
    deployed.user(USER)
    running = deployed.ok("login", "sbatch --parsable -N1 --wrap 'sleep 300'", user=USER)
    held = deployed.ok("login", "sbatch --parsable -N1 --hold --wrap true", user=USER)
    try:
        deadline = time.monotonic() + 60
        while deployed.ok("login", f"squeue -h -j {running} -o %T", user=USER) != "RUNNING":
            assert time.monotonic() < deadline, f"job {running} did not start"
            time.sleep(0.5)
        start = time.monotonic()
        deployed.ok("slurmctld", "scontrol update NodeName=cpu-1 State=DRAIN Reason='disk swap'")
        took = until(
            deployed,
            'slurm_node_drain_info{node="cpu-1",cause="admin"}',
            lambda r: any(dict(k).get("reason") == "disk swap" for k in r),
            2 * interval,
        )
        jobs = until(
            deployed,
            'sum by (state) (slurm_jobs{partition="main"})',
            lambda r: _jobs(r).get("running") == 1 and _jobs(r).get("pending") == 1,
            2 * interval,
        )
        assert max(took, jobs, time.monotonic() - start) <= 2 * interval + 1
        pending = query(deployed, 'slurm_jobs_pending_reason{partition="main"}')
        assert {dict(k)["reason"] for k in pending} == {"JobHeldUser"}
        usage = query(deployed, f'slurm_job_cpus{{job_id="{running}"}}')
        assert [dict(k)["user"] for k in usage] == [USER] and list(usage.values()) == [1]
    finally:
        deployed.sh(
            "slurmctld", f"scancel {running} {held}; scontrol update NodeName=cpu-1 State=RESUME"
        )
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"})


def test_series_come_back_after_restarts_and_a_stopped_slurmctld_is_up_0(
    deployed: Deployed,
) -> None:
    interval = settings(deployed)["scrape_interval"]
    fresh = "slurm_up == 1 and timestamp(slurm_up) > {since}"

    def back() -> None:
        since = time.time()
        until(deployed, fresh.format(since=since), bool, 30 + 2 * interval)
        until(deployed, 'count(slurm_node_state{node=~"cpu-.*"})', lambda r: 2 in r.values(), 30)

    deployed.container("exporter").restart()
    back()
    controller = deployed.container("slurmctld")
    controller.stop()
    try:
        # the exporter keeps answering, and says slurmctld does not
        until(deployed, 'slurm_up == 0 and on() up{job="slurm"} == 1', bool, 30 + 2 * interval)
        assert query(deployed, 'slurm_exporter_collector_success{collector="nodes"}')
    finally:
        controller.start()
    back()
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"})


def test_every_dashboard_query_parses_and_names_served_series(deployed: Deployed) -> None:
    # the families a scrape declares: the cluster exporter's (from Prometheus' metadata) and
    # the GPU collector's, run in the exporter's image (no driver here: families, no samples)
    until(deployed, 'up{job="slurm"} == 1', bool, 60)
    declared = set(api(deployed, "metadata")["data"])
    exporter = deployed.container("exporter")
    gpu = (
        "runuser -u slurm-exporter -- python3 /usr/local/lib/slurmforge/slurm_exporter.py gpu "
        "--node probe --listen 127.0.0.1:9342 & sleep 2; python3 -c 'import urllib.request as u; "
        'print(u.urlopen("http://127.0.0.1:9342/metrics").read().decode())\'; kill %1'
    )
    code, out = exporter.exec_run(["bash", "-c", gpu])
    assert code == 0, out
    gpu_text = out.decode()
    declared |= set(re.findall(r"^# TYPE (\S+) ", gpu_text, re.M))
    # without a driver no GPU series is faked
    assert not re.search(r"^slurm_gpu_", gpu_text, re.M)
    assert 'slurm_exporter_collector_success{collector="nvml"} 0.0' in gpu_text
    dashboards = sorted((ROOT / "monitoring" / "dashboards").glob("*.json"))
    assert len(dashboards) == 3
    for path in dashboards:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                assert api(deployed, "query", query=expr)["status"] == "success", expr
                missing = set(METRIC.findall(expr)) - declared
                assert not missing, f"{path.name}: {panel['title']}: {sorted(missing)}"
