"""What an operator watching the cluster through Prometheus sees: the real Prometheus of the
local target, scraping the exporter, answers PromQL about a drained node and the jobs within two
scrape intervals; the series come back after the exporter or slurmctld restarts, and a stopped
slurmctld is a `slurm_up` of 0 from an exporter that still answers. Each shipped dashboard's
queries parse in that Prometheus and name only series a scrape declares. A live scrape passes
Prometheus' own lint (`promtool check metrics`)."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from tests.cluster.deployed import Deployed
from tests.cluster.helpers import scrape
from tests.cluster.promql import api, query, settings, until
from tests.common import ROOT

pytestmark = pytest.mark.cluster

USER = "metricsuser"
METRIC = re.compile(r"\b(slurm_[a-zA-Z0-9_]+)\b(?!\s*\()")  # a series name, not a function


def _jobs(result: dict) -> dict[str, float]:
    return {dict(labels)["state"]: value for labels, value in result.items()}


def _started(deployed: Deployed, job: str) -> None:
    deadline = time.monotonic() + 60
    while deployed.ok("login", f"squeue -h -j {job} -o %T", user=USER) != "RUNNING":
        assert time.monotonic() < deadline, f"job {job} did not start"
        time.sleep(0.5)


def _scrape(deployed: Deployed, port: int, start: str = "") -> str:
    """A scrape of the exporter's container on ``port``, after ``start`` (a collector to run
    there first, in the background)."""
    fetch = scrape(port)
    script = f"{start} & sleep 2; {fetch}; kill %1" if start else fetch
    # stdout alone: the collector started here logs to stderr (no NVML, say)
    code, (out, err) = deployed.container("exporter").exec_run(["bash", "-c", script], demux=True)
    assert code == 0, (out or b"") + (err or b"")
    return (out or b"").decode()


def _gpu_scrape(deployed: Deployed) -> str:
    """The GPU collector's scrape, run in the exporter's image (no driver here: its families,
    no samples)."""
    collector = (
        "python3 /usr/local/lib/slurmforge/slurm_exporter.py --user slurm-exporter gpu "
        "--node probe --listen 127.0.0.1:9342"
    )
    return _scrape(deployed, 9342, collector)


def test_prometheus_sees_a_drained_node_and_the_jobs(deployed: Deployed) -> None:
    interval = settings(deployed)["scrape_interval"]
    until(deployed, 'up{job="slurm"} == 1', bool, 60)  # the exporter is scraped at all
    deployed.user(USER)
    running = deployed.ok("login", "sbatch --parsable -N1 --wrap 'sleep 300'", user=USER)
    held = deployed.ok("login", "sbatch --parsable -N1 --hold --wrap true", user=USER)
    try:
        _started(deployed, running)
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
    metadata = api(deployed, "metadata")["data"]
    declared = set(metadata)
    # a counter's family is named without the _total its samples carry (OpenMetrics)
    declared |= {
        f"{name.removesuffix('_total')}_total"
        for name, (m, *_) in metadata.items()
        if m["type"] == "counter"
    }
    gpu_text = _gpu_scrape(deployed)
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


def _promtool_check_metrics(deployed: Deployed, text: str) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` of the cluster's Prometheus image on a scrape's text."""
    prometheus = deployed.container("prometheus")
    argv = ["docker", "exec", "-i", prometheus.id, "promtool", "check", "metrics"]
    return subprocess.run(argv, input=text, capture_output=True, text=True, timeout=60)


def test_a_live_scrape_passes_promtool_check_metrics(deployed: Deployed) -> None:
    """Both collectors' scrapes, with a running job (so the job and partition series have
    samples): promtool names no problem (a gauge ending in _total, a counter without it...)."""
    deployed.user(USER)
    job = deployed.ok("login", "sbatch --parsable -N1 --wrap 'sleep 120'", user=USER)
    try:
        _started(deployed, job)
        scrape = _scrape(deployed, 9341)
    finally:
        deployed.sh("slurmctld", f"scancel {job}")
    assert re.search(r'^slurm_partition_cpus\{partition="main"\} [1-9]', scrape, re.M), scrape
    assert re.search(r"^slurm_job_cpus\{", scrape, re.M), scrape
    for text in (scrape, _gpu_scrape(deployed)):
        checked = _promtool_check_metrics(deployed, text)
        assert checked.returncode == 0 and not checked.stdout.strip(), (
            checked.stdout + checked.stderr
        )
    # promtool does find what this test looks for: the old name is refused
    old = scrape.replace("slurm_partition_cpus ", "slurm_partition_cpus_total ").replace(
        "slurm_partition_cpus{", "slurm_partition_cpus_total{"
    )
    flagged = _promtool_check_metrics(deployed, old)
    assert "slurm_partition_cpus_total" in flagged.stdout + flagged.stderr, flagged


def test_an_idle_queue_is_zero_jobs_and_slurmctlds_counts_are_counters(
    deployed: Deployed,
) -> None:
    """With no job running, `sum by (state) (slurm_jobs)` is 0 for each state of each
    partition, not empty (a panel's "No data"); the scheduler's cycle and start counts are
    counters, so rate() reads across sdiag's reset."""
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"})
    partitions = set(deployed.ok("slurmctld", "sinfo -h -o %R").split())

    def idle(result: dict) -> bool:
        seen = {(dict(k)["partition"], dict(k)["state"]): v for k, v in result.items()}
        return all(
            seen.get((part, state)) == 0 for part in partitions for state in ("running", "pending")
        )

    until(deployed, "sum by (partition, state) (slurm_jobs)", idle, 60)
    metadata = api(deployed, "metadata")["data"]
    for name in ("slurm_scheduler_cycles", "slurm_backfill_cycles", "slurm_backfill_jobs_started"):
        kinds = {m["type"] for key in (name, f"{name}_total") for m in metadata.get(key, [])}
        assert kinds == {"counter"}, (name, kinds)
        assert query(deployed, f"{name}_total"), name
    # and rate() over one answers (a dashboard panel's query)
    assert api(deployed, "query", query="rate(slurm_scheduler_cycles_total[1m])")["status"] == (
        "success"
    )
