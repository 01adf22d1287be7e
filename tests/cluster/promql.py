"""Asking the local target's Prometheus what it scraped, as an operator's PromQL would."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

import pytest

from tests.cluster.deployed import Deployed
from tests.common import load_yaml


def settings(cluster: Deployed) -> dict:
    return load_yaml(cluster.cluster_file.read_text())["metrics"]["prometheus"]


def api(cluster: Deployed, path: str, **params: str) -> dict:
    url = f"http://127.0.0.1:{settings(cluster)['port']}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def query(cluster: Deployed, promql: str) -> dict[tuple, float]:
    """An instant query's result: (label, value) pairs of each series → its value."""
    data = api(cluster, "query", query=promql)
    assert data["status"] == "success", data
    return {
        tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["data"]["result"]
    }


def until(cluster: Deployed, promql: str, wanted, timeout: float) -> float:
    """Seconds until the query's result satisfies ``wanted``; fails after ``timeout``."""
    start = time.monotonic()
    result: dict = {}
    while time.monotonic() - start < timeout:
        try:
            result = query(cluster, promql)
        except OSError:  # Prometheus itself restarting
            result = {}
        if wanted(result):
            return time.monotonic() - start
        time.sleep(0.2)
    pytest.fail(f"{promql}: after {timeout:.0f} s Prometheus answers {result}")
