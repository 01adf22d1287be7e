"""node-watch: what the Kubernetes nodes say about themselves, acted on in Slurm.

Every NODE_WATCH_CONFIG["interval"] seconds it lists the Kubernetes Nodes and the cluster's node
pods (one API call each, whatever the cluster's size) and the Slurm nodes (one scontrol), and
for each Slurm node whose pod runs on a Kubernetes node with a notice:

- a preemption notice (a cloud's Spot reclaim taint, a site's label): the Slurm node is drained
  with a reason naming the Kubernetes node and the notice, and each job running there is
  requeued under its ID at once, or, where Slurm cannot requeue it (interactive, --no-requeue),
  told why on its srun's error stream and cancelled;
- an unhealthy notice (node-problem-detector's conditions): the Slurm node is drained, its jobs
  left to finish.

A node it drained (its reasons start "slurmforge: kubernetes node ") is resumed once its pod
runs on a Kubernetes node without a notice: the notice cleared, or the pod moved. A drain with
another reason (an admin's, a health check's, a pod's preStop) is never undone here; a
preemption notice still requeues the jobs on such a node, as the node is going.

With a topology read from labels (NODE_WATCH_CONFIG["topology"]), it also places the nodes of
topology.conf by the labels of the Kubernetes node each one's pod runs on (a node without them,
or without a pod, in the "unplaced" switch or block) and writes it back into the ConfigMap the
Slurm pods mount it from. Which nodes there are is the deploy's to say (the file it applied:
a scale changes them before slurmctld knows of it); this only moves them between switches.
Once slurmctld's copy has caught up it runs `scontrol reconfigure`, and checks with `scontrol
show topology` that the new one is in force (the kubelet refreshes a ConfigMap's files within a
minute or two), asking again every RETRY seconds until it is.

It runs as SlurmUser (--user: once munged runs) and holds the token of a ServiceAccount that
may read Nodes and list the namespace's pods (and get and patch that one ConfigMap), nothing
more (deploy/k8s/node_watch.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse

from node_power import kube_request
from slurm_exporter import become

OURS = "slurmforge: kubernetes node "
TIMEOUT = 15  # one Slurm command
MOUNTED = "/etc/slurm/topology.conf"  # this pod's copy, refreshed by its kubelet
RETRY = 30  # seconds between reconfigures while slurmctld shows another topology
TRIES = 10  # then it is left as it is, and said once, until the labels change again
ROOT = "root"  # the switch above the top ones, so that any two nodes are connected


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} node-watch: {message}", flush=True)


def get(path: str) -> list[dict]:
    status, body = kube_request("GET", path)
    if status != 200:
        raise OSError(f"GET {path}: HTTP {status} {body[:200]!r}")
    return json.loads(body)["items"]


def matches(wanted: str, have: dict[str, str]) -> bool:
    """``key`` (any value) or ``key=value`` against a node's labels or taints."""
    key, eq, value = wanted.partition("=")
    return key in have and (not eq or have[key] == value)


def notice(node: dict, spec: dict) -> str | None:
    """What of ``spec`` (taints, labels, conditions) ``node`` carries, in words; None: nothing."""
    taints = {t["key"]: t.get("value", "") for t in node.get("spec", {}).get("taints") or []}
    labels = node["metadata"].get("labels") or {}
    conditions = {
        c["type"] for c in node.get("status", {}).get("conditions") or [] if c["status"] == "True"
    }
    found = [f"taint {t}" for t in spec["taints"] if matches(t, taints)]
    found += [f"label {lb}" for lb in spec["labels"] if matches(lb, labels)]
    found += [f"condition {c}" for c in spec["conditions"] if c in conditions]
    return ", ".join(found) or None


def slurm(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout


def slurm_nodes() -> dict[str, tuple[str, str]]:
    """Slurm node → (its state flags, its reason)."""
    out = {}
    for line in slurm("scontrol", "-o", "show", "node").splitlines():
        name = re.search(r"^NodeName=(\S+)", line)
        state = re.search(r" State=(\S+)", line)
        if name and state:
            reason = re.search(r" Reason=(.*?) \[[^\]]*\]", line)
            out[name.group(1)] = (state.group(1), reason.group(1) if reason else "")
    return out


def take_jobs(node: str, why: str) -> None:
    """Requeue the jobs running on ``node`` (their IDs kept); tell and cancel the rest."""
    for job in slurm("squeue", "-h", "-w", node, "-t", "RUNNING,SUSPENDED", "-o", "%i").split():
        shown = f" {slurm('scontrol', '-o', 'show', 'job', job).strip()} "
        if " BatchFlag=1 " in shown and " Requeue=1 " in shown:
            try:
                slurm("scontrol", "requeue", job)
                log(f"{node}: job {job} requeued ({why})")
                continue
            except subprocess.CalledProcessError as exc:
                log(f"{node}: job {job} could not be requeued: {exc.stderr.strip()}")
        said = f"slurmforge: node {node} is being taken ({why})"
        told = f"{said}; job {job} cannot be requeued and is cancelled"
        for argv in (
            ["scontrol", "notify", job, told],  # to its srun's error stream
            ["scontrol", "update", f"JobId={job}", f"AdminComment={said}; cancelled"],
            ["scancel", job],
        ):
            subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=False)
        log(f"{node}: job {job} cancelled ({why}; it cannot be requeued)")


def topology_conf(
    topology: dict, nodes: list[str], placed: dict[str, str], labels: dict[str, dict]
) -> str:
    """topology.conf for ``nodes``: each in the switch path (tree) or block its Kubernetes
    node's labels give, or, lacking any of them or a pod, in the unplaced one."""
    unplaced = topology["unplaced"]

    def values(node: str) -> list[str] | None:
        have = labels.get(placed.get(node, ""), {})
        found = [have.get(key, "") for key in topology["keys"]]
        return found if all(found) else None

    lines = [topology["header"]]
    if topology["kind"] == "block":
        blocks: dict[str, list[str]] = {}
        for node in nodes:
            found = values(node)
            blocks.setdefault(found[0] if found else unplaced, []).append(node)
        lines += [f"BlockName={b} Nodes={','.join(n)}" for b, n in sorted(blocks.items())]
        if topology["block_sizes"]:
            lines.append(f"BlockSizes={','.join(map(str, topology['block_sizes']))}")
        return "\n".join(lines) + "\n"
    leaves: dict[str, list[str]] = {}
    uppers: dict[str, set[str]] = {}
    tops = set()
    for node in nodes:
        found = values(node)
        # a switch is named by its path (zone.rack): racks of two zones may share a name
        path = [".".join(found[: i + 1]) for i in range(len(found))] if found else [unplaced]
        leaves.setdefault(path[-1], []).append(node)
        for parent, child in itertools.pairwise(path):
            uppers.setdefault(parent, set()).add(child)
        tops.add(path[0])
    lines += [f"SwitchName={s} Nodes={','.join(n)}" for s, n in sorted(leaves.items())]
    lines += [f"SwitchName={s} Switches={','.join(sorted(c))}" for s, c in sorted(uppers.items())]
    if len(tops) > 1:
        lines.append(f"SwitchName={ROOT} Switches={','.join(sorted(tops))}")
    return "\n".join(lines) + "\n"


def entries(text: str) -> dict[str, frozenset[str]]:
    """Switch or block → its nodes, of topology.conf or of `scontrol show topology` (whose
    upper switches list their nodes too; blocks Slurm joins for BlockSizes are left out)."""
    out = {}
    for line in text.splitlines():
        name = re.search(r"(?:SwitchName|BlockName)=(\S+)", line)
        nodes = re.search(r" Nodes=(\S+)", line)
        if name and "," not in name.group(1) and nodes and nodes.group(1) != "(null)":
            out[name.group(1)] = frozenset(
                slurm("scontrol", "show", "hostnames", nodes.group(1)).split()
            )
    return out


class Topology:
    """topology.conf kept as the labels say, and slurmctld reloaded until it shows it."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.path = f"/api/v1/namespaces/{{namespace}}/configmaps/{spec['config_map']}"
        self.reload_at: float | None = 0.0  # a first look checks what slurmctld shows
        self.tries = 0
        self.read: tuple[str, list[str]] = ("", [])  # the last file seen → its nodes

    def nodes(self, have: str) -> list[str]:
        """The nodes of the file as the ConfigMap has it. The deploy writes which nodes there
        are (a scale changes them before slurmctld knows); this only places them."""
        if have != self.read[0]:
            found = {n for names in entries(have).values() for n in names}
            self.read = (have, sorted(found))
        return self.read[1]

    def keep(self, known: list[str], placed: dict[str, str], labels: dict[str, dict]) -> None:
        """``known``: Slurm's nodes, where the file names none (never an empty topology)."""
        status, body = kube_request("GET", self.path)
        if status != 200:
            raise OSError(f"GET {self.path}: HTTP {status} {body[:200]!r}")
        have = (json.loads(body).get("data") or {}).get("topology.conf", "")
        want = topology_conf(self.spec, self.nodes(have) or known, placed, labels)
        if have != want:
            status, body = kube_request("PATCH", self.path, {"data": {"topology.conf": want}})
            if status != 200:
                raise OSError(f"PATCH {self.path}: HTTP {status} {body[:200]!r}")
            said = "; ".join(want.splitlines()[1:])
            log(f"topology.conf written from the labels: {said}")
            self.reload_at, self.tries = time.monotonic(), 0
        if self.reload_at is None or time.monotonic() < self.reload_at:
            return
        if entries(slurm("scontrol", "show", "topology")) == entries(want):
            if self.tries:
                log("slurmctld runs the new topology")
            self.reload_at, self.tries = None, 0
            return
        if self.tries >= TRIES:
            log(f"slurmctld still shows another topology after {TRIES} reconfigures; left")
            self.reload_at = None
            return
        try:
            with open(MOUNTED, encoding="utf-8") as f:
                mounted = f.read()
        except OSError:
            mounted = ""
        if mounted == want or self.tries:  # this pod's copy is there: slurmctld's likely too
            slurm("scontrol", "reconfigure")
            self.tries += 1
            log(f"scontrol reconfigure for the new topology (try {self.tries})")
            self.reload_at = time.monotonic() + RETRY


def look(config: dict, topology: Topology | None) -> None:
    kube_nodes = get("/api/v1/nodes")
    selector = urllib.parse.urlencode({"labelSelector": config["pods"]})
    pods = get(f"/api/v1/namespaces/{{namespace}}/pods?{selector}")
    notices = {
        n["metadata"]["name"]: (notice(n, config["preemption"]), notice(n, config["unhealthy"]))
        for n in kube_nodes
    }
    placed = {
        p["spec"].get("hostname") or p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }
    known = slurm_nodes()
    for node, (state, reason) in sorted(known.items()):
        if node not in placed:
            continue  # no pod (stopped, pending, being deleted): nothing to say about it
        where = placed[node]
        preempted, unhealthy = notices.get(where, (None, None))
        drained = "DRAIN" in state
        if (preempted or unhealthy) and not drained:
            said = f"preemption notice ({preempted})" if preempted else unhealthy
            why = f"{OURS}{where}: {said}"
            slurm("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={why}")
            log(f"{node}: drained ({why})")
        if preempted:
            take_jobs(node, f"preemption notice on kubernetes node {where}: {preempted}")
        elif drained and not unhealthy and reason.startswith(OURS):
            slurm("scontrol", "update", f"NodeName={node}", "State=UNDRAIN")
            log(f"{node}: resumed (kubernetes node {where} has no notice now)")
    if topology:  # after the notices, which cannot wait for it
        labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in kube_nodes}
        topology.keep(sorted(known), placed, labels)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="node-watch")
    parser.add_argument("--user", default="", help="the account to become (SlurmUser)")
    args = parser.parse_args(argv)
    if args.user:
        become(args.user)
    config = json.loads(os.environ["NODE_WATCH_CONFIG"])
    log(
        f"watching every {config['interval']} s: preemption {config['preemption']}, "
        f"unhealthy {config['unhealthy']}"
    )
    topology = Topology(config["topology"]) if config["topology"] else None
    said = ""
    while True:
        try:
            look(config, topology)
            said = ""
        except (OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", None) or str(exc)
            if str(detail) != said:  # once, not at every look
                log(f"look failed: {str(detail).strip()}")
                said = str(detail)
        time.sleep(config["interval"])


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(0)
