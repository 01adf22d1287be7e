#!/usr/bin/python3
"""slurmforge's Prometheus exporter: the cluster as Slurm's own JSON output tells it.

    slurm_exporter.py [--user NAME] cluster [--listen ADDR:PORT] [--accounting] [--usage-window S]
    slurm_exporter.py [--user NAME] gpu --node NAME [--listen ADDR:PORT]

Every scrape presents the cluster's metrics token as a bearer token (Authorization: Bearer
<token>), read once at start from $METRICS_TOKEN_FILE (/run/secrets/metrics-token): the series
name users and their jobs. Started as root with --user, the exporter reads the token and then
becomes that account.

`cluster` answers each scrape with what Slurm says at that moment: nodes and partitions from
`scontrol show nodes --json` (one RPC), jobs from `squeue --json`, the scheduler's statistics
from slurmctld's own metrics endpoint (GET /metrics/scheduler, Slurm 25.11 and later, when
slurm.conf sets MetricsType) or else `sdiag --json`, and, with --accounting, slurmdbd's view
(`sacct --json`) of the jobs that ended within the usage window. A command that fails makes its
collector's `slurm_exporter_collector_success` 0 and leaves its series out; `slurm_up` says
whether slurmctld answered. Nothing is cached: Prometheus' scrape interval is the only rate.

`gpu` runs on a GPU node and reads the GPUs through NVML (nvidia-ml-py). Without a driver it
serves no GPU series at all, only its collector's success of 0.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import pwd
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from socketserver import ThreadingMixIn
from typing import NamedTuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, make_wsgi_app
from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

# seconds one Slurm command may take before its collector gives up: below Prometheus' scrape
# timeout, so that an unreachable slurmctld is an answer (slurm_up 0), not a failed scrape
COMMAND_TIMEOUT = float(os.environ.get("SLURM_EXPORTER_TIMEOUT", "8"))
SLURM_CONF = "/etc/slurm/slurm.conf"
HEALTH_CHECK_REASON = "slurmforge-gpu-check"  # the GPU health check's drain reasons start so
NODE_HEALTH_REASON = "health:"  # the node health check's (images/slurmd/node-health)
SLURMFORGE_REASON = "slurmforge"  # scale and upgrade drains
MIB = 2**20


def number(value: object) -> float | None:
    """A JSON number as Slurm's data parsers write it: plain, or {set, infinite, number}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    return float(value) if isinstance(value, (int, float)) else None


def slurm_json(*argv: str) -> dict:
    """What a Slurm command prints with --json; raises on a failure."""
    done = subprocess.run(
        [*argv, "--json"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
    )
    if done.returncode:
        raise RuntimeError(f"{argv[0]}: {done.stderr.strip()[-200:]}")
    return json.loads(done.stdout)


def node_state(states: list[str]) -> str:
    """One word for a node's state flags, as sinfo prints it (drained, draining, down, ...)."""
    base, flags = states[0].lower() if states else "unknown", {s.upper() for s in states[1:]}
    if "DRAIN" in flags:
        return "draining" if base in ("allocated", "mixed", "completing") else "drained"
    for flag in ("NOT_RESPONDING", "FAIL", "MAINTENANCE", "REBOOT_REQUESTED"):
        if flag in flags:
            return flag.lower()
    if base == "down":  # an elastic node that did not start in time is down, powered down or not
        return base
    # an elastic node set's: stopped, being started, being stopped (power saving)
    for flag in ("POWERED_DOWN", "POWERING_UP", "POWERING_DOWN"):
        if flag in flags:
            return flag.lower()
    if "COMPLETING" in flags:
        return "completing"
    return base


def drain_cause(reason: str) -> str:
    """Who drained a node: the GPU health check, the node health check, slurmforge itself (scale,
    upgrade) or an admin."""
    if reason.startswith(HEALTH_CHECK_REASON):
        return "gpu-health-check"
    if reason.startswith(NODE_HEALTH_REASON):
        return "health-check"
    if reason.startswith(SLURMFORGE_REASON):
        return "slurmforge"
    return "admin"


def gpus_of(gres: str) -> int:
    """GPUs in a GRES string such as 'gpu:2', 'gpu:a100:4(S:0-1)' or 'gpu:a100:1(IDX:0),shard:2'."""
    total = 0
    for item in re.split(r",(?![^(]*\))", gres):
        fields = item.split("(")[0].split(":")
        if fields[0] == "gpu" and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def tres(text: str) -> dict[str, float]:
    """'cpu=2,mem=2G,gres/gpu=1' → {'cpu': 2, 'mem': bytes, 'gres/gpu': 1}."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
    out = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        scale = units.get(value[-1:], 1)
        try:
            out[key] = float(value[:-1] if scale > 1 else value) * scale
        except ValueError:
            continue
    return out


# A family's spec: (help, label names), a gauge; or (help, label names, COUNTER). Prometheus'
# guidance: a counter only grows, but for resets (which rate() and increase() handle), and its
# samples end in _total; anything that may go down is a gauge, never named *_total.
COUNTER = "counter"


def _family(name: str, spec: tuple) -> Metric:
    doc, labels, *kind = spec
    made = CounterMetricFamily if kind == [COUNTER] else GaugeMetricFamily
    return made(name, doc, labels=labels)


class Families:
    """The metric families one collector yields, made on first use."""

    def __init__(self, specs: dict[str, tuple]):
        self.specs = specs
        self.made: dict[str, Metric] = {}

    def add(self, name: str, labels: tuple[str, ...], value: float) -> None:
        if name not in self.made:
            self.made[name] = _family(name, self.specs[name])
        self.made[name].add_metric(list(labels), value)

    def __iter__(self) -> Iterator[Metric]:
        # every declared family, with or without samples: a scrape tells what the exporter serves
        for name, spec in self.specs.items():
            yield self.made.get(name) or _family(name, spec)


NODE_FAMILIES = {
    "slurm_node_state": (
        "1 for a node in this state (sinfo's word for its flags)",
        ("node", "state"),
    ),
    "slurm_node_drain_info": (
        "1 for a drained or draining node; cause: gpu-health-check, health-check, slurmforge or "
        "admin",
        ("node", "cause", "reason"),
    ),
    "slurm_partition_nodes": ("nodes of a partition in a state", ("partition", "state")),
    "slurm_partition_cpus": ("CPUs of a partition's nodes", ("partition",)),
    "slurm_partition_cpus_allocated": ("CPUs allocated to jobs", ("partition",)),
    "slurm_partition_memory_total_bytes": ("memory of a partition's nodes", ("partition",)),
    "slurm_partition_memory_allocated_bytes": ("memory allocated to jobs", ("partition",)),
    "slurm_partition_gpus": ("GPUs (GRES gpu) of a partition's nodes", ("partition",)),
    "slurm_partition_gpus_allocated": ("GPUs allocated to jobs", ("partition",)),
}


def collect_nodes() -> Families:
    out = Families(NODE_FAMILIES)
    states: dict[str, Counter] = defaultdict(Counter)
    sums: dict[str, Counter] = defaultdict(Counter)
    for node in slurm_json("scontrol", "show", "nodes")["nodes"]:
        name, state = node["name"], node_state(node.get("state") or [])
        out.add("slurm_node_state", (name, state), 1)
        if state in ("drained", "draining"):
            reason = node.get("reason") or ""
            out.add("slurm_node_drain_info", (name, drain_cause(reason), reason[:200]), 1)
        for part in node.get("partitions") or []:
            states[part][state] += 1
            sums[part]["cpus"] += node.get("cpus") or 0
            sums[part]["cpus_allocated"] += node.get("alloc_cpus") or 0
            sums[part]["memory_total_bytes"] += (number(node.get("real_memory")) or 0) * MIB
            sums[part]["memory_allocated_bytes"] += (number(node.get("alloc_memory")) or 0) * MIB
            sums[part]["gpus"] += gpus_of(node.get("gres") or "")
            sums[part]["gpus_allocated"] += gpus_of(node.get("gres_used") or "")
    for part, counts in states.items():
        for state, count in counts.items():
            out.add("slurm_partition_nodes", (part, state), count)
        for key, value in sums[part].items():
            out.add(f"slurm_partition_{key}", (part,), value)
    return out


# A job's base states as squeue names them (Slurm's job_state_string, lower-cased). Each
# partition has a slurm_jobs sample for every one, 0 where no job is in it, so that
# `sum by (state) (slurm_jobs)` is 0, not empty, on an idle cluster.
JOB_STATES = (
    "pending",
    "running",
    "suspended",
    "completed",
    "cancelled",
    "failed",
    "timeout",
    "node_fail",
    "preempted",
    "boot_fail",
    "deadline",
    "out_of_memory",
)
JOB_FAMILIES = {
    "slurm_jobs": (
        "jobs in the queue by partition and state; 0 for each state no job is in",
        ("partition", "state"),
    ),
    # Not zero-filled: Slurm has some two hundred pending reasons, most never seen on a given
    # cluster; a zero for each would multiply the series for nothing. Read the total with
    # `sum(slurm_jobs{state="pending"})`, which is zero-filled, or add `or vector(0)`.
    "slurm_jobs_pending_reason": (
        "pending jobs by partition and reason; only reasons some job has (no zeros)",
        ("partition", "reason"),
    ),
    "slurm_jobs_pending_oldest_seconds": (
        "age of a partition's oldest pending job (since submission)",
        ("partition",),
    ),
    "slurm_job_cpus": (
        "CPUs allocated to a running job",
        ("job_id", "user", "account", "partition"),
    ),
    "slurm_job_memory_bytes": (
        "memory allocated to a running job",
        ("job_id", "user", "account", "partition"),
    ),
    "slurm_job_gpus": (
        "GPUs allocated to a running job",
        ("job_id", "user", "account", "partition"),
    ),
}


def collect_jobs() -> Families:
    out = Families(JOB_FAMILIES)
    partitions = [p["name"] for p in slurm_json("scontrol", "show", "partitions")["partitions"]]
    counts: Counter = Counter({(part, state): 0 for part in partitions for state in JOB_STATES})
    reasons: Counter = Counter()
    oldest: dict[str, float] = {}
    now = time.time()
    for job in slurm_json("squeue")["jobs"]:
        part = job.get("partition") or ""
        state = (job.get("job_state") or ["UNKNOWN"])[0].lower()
        counts[part, state] += 1
        if state == "pending":
            reasons[part, job.get("state_reason") or "None"] += 1
            submitted = number(job.get("submit_time"))
            if submitted:
                oldest[part] = max(oldest.get(part, 0.0), now - submitted)
        elif state == "running":
            labels = (
                str(job["job_id"]),
                job.get("user_name") or "",
                job.get("account") or "",
                part,
            )
            alloc = tres(job.get("tres_alloc_str") or "")
            out.add("slurm_job_cpus", labels, alloc.get("cpu", 0))
            out.add("slurm_job_memory_bytes", labels, alloc.get("mem", 0))
            out.add("slurm_job_gpus", labels, alloc.get("gres/gpu", 0))
    for (part, state), count in counts.items():
        out.add("slurm_jobs", (part, state), count)
    for (part, reason), count in reasons.items():
        out.add("slurm_jobs_pending_reason", (part, reason), count)
    for part, age in oldest.items():
        out.add("slurm_jobs_pending_oldest_seconds", (part,), age)
    return out


class Statistic(NamedTuple):
    """One of slurmctld's scheduling statistics, which its two sources name differently."""

    doc: str
    sdiag: str  # its field in `sdiag --json`
    endpoint: str  # its name in /metrics/scheduler less slurm_ (src/plugins/metrics/openmetrics)
    scale: float  # from both to the family's unit
    counter: bool = False  # grows but for resets (a restart, sdiag's reset at midnight)


# exporter family → the statistic it serves
SCHEDULER = {
    "slurm_scheduler_cycle_last_seconds": Statistic(
        "last main scheduling cycle",
        "schedule_cycle_last",
        "schedule_cycle_last",
        1e-6,
    ),
    "slurm_scheduler_cycle_mean_seconds": Statistic(
        "mean main scheduling cycle",
        "schedule_cycle_mean",
        "sched_mean_cycle",
        1e-6,
    ),
    "slurm_scheduler_cycles": Statistic(
        "main scheduling cycles (a counter: grows until a reset)",
        "schedule_cycle_total",
        "schedule_cycle_cnt",
        1,
        counter=True,
    ),
    "slurm_scheduler_queue_length": Statistic(
        "jobs in the main scheduler's queue",
        "schedule_queue_length",
        "schedule_queue_len",
        1,
    ),
    "slurm_scheduler_server_threads": Statistic(
        "slurmctld's server threads",
        "server_thread_count",
        "server_thread_cnt",
        1,
    ),
    "slurm_scheduler_agent_queue_size": Statistic(
        "slurmctld's outgoing RPC queue",
        "agent_queue_size",
        "agent_queue_size",
        1,
    ),
    "slurm_scheduler_dbd_agent_queue_size": Statistic(
        "messages waiting for slurmdbd",
        "dbd_agent_queue_size",
        "slurmdbd_queue_size",
        1,
    ),
    "slurm_backfill_cycle_last_seconds": Statistic(
        "last backfill cycle",
        "bf_cycle_last",
        "bf_cycle_last",
        1e-6,
    ),
    "slurm_backfill_cycle_mean_seconds": Statistic(
        "mean backfill cycle",
        "bf_cycle_mean",
        "bf_mean_cycle",
        1e-6,
    ),
    "slurm_backfill_cycles": Statistic(
        "backfill cycles (a counter: grows until a reset)",
        "bf_cycle_counter",
        "bf_cycle_cnt",
        1,
        counter=True,
    ),
    "slurm_backfill_jobs_started": Statistic(
        "jobs started by backfill (a counter: grows until a reset)",
        "bf_backfilled_jobs",
        "backfilled_jobs",
        1,
        counter=True,
    ),
    "slurm_backfill_last_depth": Statistic(
        "jobs the last backfill cycle looked at",
        "bf_last_depth",
        "bf_last_depth",
        1,
    ),
}
SCHEDULER_FAMILIES = {
    **{
        name: (stat.doc, (), COUNTER) if stat.counter else (stat.doc, ())
        for name, stat in SCHEDULER.items()
    },
    "slurm_scheduler_source": ("1 for where the statistics came from", ("source",)),
}


class Scheduler:
    """slurmctld's scheduling statistics: from its metrics endpoint where slurm.conf turns that
    on (MetricsType, Slurm 25.11 and later), else from sdiag. slurm.conf is read at each scrape,
    so a controller that never serves HTTP is never sent a request it would log as garbage."""

    def __init__(self, conf: str = SLURM_CONF):
        self.conf = conf

    def native(self) -> dict[str, float] | None:
        settings = slurm_conf(self.conf)
        if settings.get("metricstype", "").lower() != "metrics/openmetrics":
            return None
        url = f"http://{controller_address(settings)}/metrics/scheduler"
        try:
            with urllib.request.urlopen(url, timeout=COMMAND_TIMEOUT) as response:
                text = response.read().decode()
        except OSError:  # refused (PrivateData turns the endpoint off) or slurmctld away
            return None
        values = {
            sample.name.removeprefix("slurm_"): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        # every family or none from here: a name a later Slurm renames falls back to sdiag whole
        if not all(stat.endpoint in values for stat in SCHEDULER.values()):
            return None
        return values

    def __call__(self) -> Families:
        out = Families(SCHEDULER_FAMILIES)
        values = self.native()
        if values is not None:
            source, named = "metrics-endpoint", "endpoint"
        else:
            values = {k: number(v) for k, v in slurm_json("sdiag")["statistics"].items()}
            source, named = "sdiag", "sdiag"
        for name, stat in SCHEDULER.items():
            value = values.get(getattr(stat, named))
            if value is not None:
                out.add(name, (), value * stat.scale)
        out.add("slurm_scheduler_source", (source,), 1)
        return out


USAGE_LABELS = ("job_id", "user", "account", "partition", "state")
ACCOUNTING_FAMILIES = {
    "slurm_dbd_up": ("1 when slurmdbd answered sacct", ()),
    "slurm_job_cpu_seconds": (
        "CPU time a job used (user + system), jobs ended lately",
        USAGE_LABELS,
    ),
    "slurm_job_max_rss_bytes": (
        "largest resident set of a job's steps, jobs ended lately",
        USAGE_LABELS,
    ),
    "slurm_job_elapsed_seconds": ("wall time of a job, jobs ended lately", USAGE_LABELS),
}


def _seconds(total: dict) -> float:
    return (total.get("seconds") or 0) + (total.get("microseconds") or 0) / 1e6


def _max_rss(steps: list[dict]) -> float:
    best = 0.0
    for step in steps:
        for item in ((step.get("tres") or {}).get("requested") or {}).get("max") or []:
            if item.get("type") == "mem":
                best = max(best, float(item.get("count") or 0))
    return best


class Accounting:
    def __init__(self, window: float):
        self.window = int(window)

    def __call__(self) -> Families:
        out = Families(ACCOUNTING_FAMILIES)
        try:
            jobs = slurm_json(
                "sacct",
                "--allusers",
                "--starttime",
                f"now-{self.window}seconds",
                "--state",
                "CD,F,CA,TO,OOM,NF,PR,DL",
            )["jobs"]
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError):
            out.add("slurm_dbd_up", (), 0)
            return out
        out.add("slurm_dbd_up", (), 1)
        for job in jobs:
            state = ((job.get("state") or {}).get("current") or ["UNKNOWN"])[0].lower()
            labels = (
                str(job.get("job_id")),
                job.get("user") or "",
                job.get("account") or "",
                job.get("partition") or "",
                state,
            )
            time_ = job.get("time") or {}
            out.add("slurm_job_cpu_seconds", labels, _seconds(time_.get("total") or {}))
            out.add("slurm_job_elapsed_seconds", labels, float(time_.get("elapsed") or 0))
            out.add("slurm_job_max_rss_bytes", labels, _max_rss(job.get("steps") or []))
        return out


def _run(item: tuple[str, tuple[dict, Callable[[], Families]]]) -> tuple:
    """One collector: (name, its families, 1 or 0 for success, seconds taken)."""
    name, (specs, collect) = item
    start = time.monotonic()
    try:
        families, ok = list(collect()), 1
    except Exception as error:  # any failure is reported, never fatal
        print(f"slurm-exporter: {name}: {error}", file=sys.stderr, flush=True)
        families, ok = list(Families(specs)), 0
    return name, families, ok, time.monotonic() - start


class Exporter(Collector):
    """Runs each collector per scrape; one that fails is left out and says so."""

    def __init__(
        self,
        collectors: dict[str, tuple[dict, Callable[[], Families]]],
        up: str | None,
    ):
        # name → (the families it declares, the collector); a scrape always declares every
        # family (HELP and TYPE), with samples only from the collectors that answered
        self.collectors = collectors
        self.up = up  # the collector whose success is `slurm_up`

    def collect(self) -> Iterator[Metric]:
        success = GaugeMetricFamily(
            "slurm_exporter_collector_success",
            "1 when a collector's source answered",
            labels=["collector"],
        )
        took = GaugeMetricFamily(
            "slurm_exporter_collector_seconds", "how long a collector took", labels=["collector"]
        )
        up = None
        # side by side: a scrape takes as long as its slowest collector
        with ThreadPoolExecutor(len(self.collectors)) as pool:
            done = pool.map(_run, self.collectors.items())
            for name, families, ok, seconds in done:
                yield from families
                success.add_metric([name], ok)
                took.add_metric([name], seconds)
                if name == self.up:
                    up = ok
        yield success
        yield took
        if self.up:
            yield GaugeMetricFamily("slurm_up", "1 when slurmctld answered", value=up or 0)


GPU_LABELS = ("node", "gpu", "uuid", "model")
GPU_FAMILIES = {
    "slurm_gpu_utilization_ratio": ("GPU busy share over the last sample period", GPU_LABELS),
    "slurm_gpu_memory_used_bytes": ("GPU memory in use", GPU_LABELS),
    "slurm_gpu_memory_total_bytes": ("GPU memory", GPU_LABELS),
    "slurm_gpu_temperature_celsius": ("GPU temperature", GPU_LABELS),
    "slurm_gpu_power_watts": ("GPU power draw", GPU_LABELS),
}


class Gpus:
    """A GPU node's GPUs through NVML; raises (no series) where no driver answers."""

    def __init__(self, node: str):
        self.node = node

    def __call__(self) -> Families:
        import pynvml  # nvidia-ml-py; loads libnvidia-ml.so.1 from the mounted driver

        out = Families(GPU_FAMILIES)
        pynvml.nvmlInit()
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                labels = (self.node, str(i), _text(uuid), _text(name))
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
                temp = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
                out.add("slurm_gpu_utilization_ratio", labels, rates.gpu / 100)
                out.add("slurm_gpu_memory_used_bytes", labels, memory.used)
                out.add("slurm_gpu_memory_total_bytes", labels, memory.total)
                out.add("slurm_gpu_temperature_celsius", labels, temp)
                out.add(
                    "slurm_gpu_power_watts", labels, pynvml.nvmlDeviceGetPowerUsage(handle) / 1000
                )
        finally:
            pynvml.nvmlShutdown()
        return out


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def slurm_conf(path: str = SLURM_CONF) -> dict[str, str]:
    """slurm.conf's settings, keys lower-cased; the first SlurmctldHost where several are."""
    settings: dict[str, str] = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            key, _, value = line.split("#")[0].strip().partition("=")
            settings.setdefault(key.strip().lower(), value.strip())
    return settings


def controller_address(settings: dict[str, str]) -> str:
    """host:port of the first SlurmctldHost (its address when it names one)."""
    name, _, addr = settings.get("slurmctldhost", "localhost").partition("(")
    port = settings.get("slurmctldport", "6817").split("-")[0]
    return f"{addr.rstrip(')') or name}:{port}"


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape left hanging never holds the exporter's exit


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per scrape says nothing


def guarded(app: Callable, token: bytes) -> Callable:
    """``app``, answering only a request that presents ``token`` as its bearer token."""
    expected = b"Bearer " + token

    def serve(environ: dict, start_response: Callable) -> list[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if not hmac.compare_digest(given, expected):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
            )
            return [b"a scrape presents the cluster's metrics token\n"]
        return app(environ, start_response)

    return serve


def read_token() -> bytes:
    path = os.environ.get("METRICS_TOKEN_FILE", "/run/secrets/metrics-token")
    try:
        token = open(path, "rb").read().strip()  # noqa: SIM115 (read whole at once)
    except OSError as exc:
        sys.exit(f"slurm-exporter: the metrics token {path}: {exc.strerror}")
    if not token:
        sys.exit(f"slurm-exporter: the metrics token {path} is empty")
    return token


def become(user: str) -> None:
    """Drop root for ``user``'s account, its groups and no other."""
    account = pwd.getpwnam(user)
    os.initgroups(user, account.pw_gid)
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="slurm-exporter")
    parser.add_argument("--user", default="", help="the account to become once the token is read")
    parser.add_argument("mode", choices=("cluster", "gpu"))
    parser.add_argument("--listen", default="0.0.0.0:9341")
    # the deploy targets set these (the cluster file's accounting.enabled, metrics.usage_window)
    env = os.environ.get
    parser.add_argument(
        "--accounting", action="store_true", default=env("SLURM_EXPORTER_ACCOUNTING") == "1"
    )
    parser.add_argument(
        "--usage-window", type=float, default=float(env("SLURM_EXPORTER_USAGE_WINDOW", "3600"))
    )
    parser.add_argument("--node", default="")
    args = parser.parse_args(argv)
    token = read_token()
    if args.user:
        become(args.user)
    if args.mode == "cluster":
        collectors: dict[str, tuple[dict, Callable[[], Families]]] = {
            "nodes": (NODE_FAMILIES, collect_nodes),
            "jobs": (JOB_FAMILIES, collect_jobs),
            "scheduler": (SCHEDULER_FAMILIES, Scheduler()),
        }
        if args.accounting:
            collectors["accounting"] = (ACCOUNTING_FAMILIES, Accounting(args.usage_window))
        exporter = Exporter(collectors, up="nodes")
    else:
        exporter = Exporter({"nvml": (GPU_FAMILIES, Gpus(args.node))}, up=None)
    # the client library's own process, platform and Python series say nothing about the cluster
    for own in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        REGISTRY.unregister(own)
    REGISTRY.register(exporter)
    address, _, port = args.listen.rpartition(":")
    app = guarded(make_wsgi_app(), token)
    server = make_server(address or "0.0.0.0", int(port), app, Server, QuietHandler)
    print(
        f"slurm-exporter: {args.mode} metrics on {args.listen}/metrics", file=sys.stderr, flush=True
    )
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
