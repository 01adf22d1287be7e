"""A site's own configuration, as a platform team would keep it beside its cluster file: Slurm
settings, a QoS with a per-user limit and the account that may use it, a prolog script, a
node health check of its own, a read-only dataset directory and a switch topology. Both
targets' tiers deploy it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROLOG = """#!/bin/sh
# Runs as root on the node before each job; the jail is at /jail there. A site's health check
# would fail on a broken node; this one fails where a test asks it to.
if [ -e "/jail/scratch/fail-prolog-$(hostname)" ]; then
    echo "prolog: asked to fail" >&2
    exit 1
fi
echo "$SLURM_JOB_ID $(hostname)" > "/jail/scratch/prolog-$SLURM_JOB_ID-$(hostname)"
"""
README = "site data, read-only\n"
# the site's own node health check (health.checks), run as root on each node every interval
HEALTH_CHECK = """#!/bin/sh
# A site's check of something slurmforge cannot know about; it fails where a test asks it to.
if [ -e "/jail/scratch/fail-health-$(hostname)" ]; then
    echo "checking the fabric"
    echo "link down (asked by a test)"
    exit 1
fi
"""
HEALTH_INTERVAL = 5  # seconds: the tests wait a few of them


def site(root: Path, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a cluster file's) with the site's settings; writes the prolog next to the
    cluster file and the dataset under ``root``."""
    (root / "prolog.sh").write_text(PROLOG)
    (root / "health.d").mkdir(exist_ok=True)
    (root / "health.d" / "fabric").write_text(HEALTH_CHECK)
    datasets = root / "datasets"
    datasets.mkdir(exist_ok=True)
    (datasets / "README").write_text(README)
    nodesets = [{**ns, "slurm": {"Weight": 10}} for ns in data["nodesets"]]
    partitions = [{**p, "slurm": {"PriorityTier": 2}} for p in data["partitions"]]
    return {
        **data,
        "slurm": {
            "conf": {
                "SchedulerParameters": "batch_sched_delay=0,bf_interval=5",
                "MaxArraySize": 5001,
            },
            "prolog": ["prolog.sh"],
        },
        "accounting": {
            **data.get("accounting", {}),
            "enforce": ["associations", "limits", "qos"],
            "qos": [{"name": "small", "Priority": 10, "MaxTRESPerUser": "cpu=1"}],
            "accounts": [{"name": "default", "QOS": ["normal", "small"]}],
        },
        "mounts": [{"path": "/datasets", "host_path": str(datasets), "read_only": True}],
        "topology": {"tree": [{"name": "leaf0", "nodesets": [ns["name"] for ns in nodesets]}]},
        "health": {"interval": HEALTH_INTERVAL, "checks": "health.d"},
        "nodesets": nodesets,
        "partitions": partitions,
    }
