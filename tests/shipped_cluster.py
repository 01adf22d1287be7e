"""CI's guard for the cluster README's first command leaves running (deploy/cluster.yaml): the
suite runs beside it, and must leave it as it found it.

    python -m tests.shipped_cluster snapshot FILE   (after `invoke deploy`, before the tiers)
    python -m tests.shipped_cluster check FILE      (after the tiers)

``snapshot`` records what a test could disturb: each container of its Compose project (ID,
image, start time, restart count), its volumes and networks, its secrets on disk, what Slurm
says of its nodes, and that each published port answers. ``check`` reads all of it again and
names every difference; exit 1 if there is one. Neither changes anything in the cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import urllib.request
from pathlib import Path

import docker

from tests.common import load_yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_FILE = ROOT / "deploy" / "cluster.yaml"


def _state_dir(name: str) -> Path:
    base = os.environ.get("SLURMFORGE_STATE_DIR") or Path.home() / ".local/state/slurmforge"
    return Path(base) / name


def _answers(address: str, port: int, probe: str) -> str:
    """What a published port says: sshd's banner, or an HTTP status."""
    try:
        if probe == "ssh":
            with socket.create_connection((address, port), timeout=10) as sock:
                return sock.recv(64).decode(errors="replace").split("-")[0]
        with urllib.request.urlopen(f"http://{address}:{port}{probe}", timeout=10) as response:
            return f"HTTP {response.status}"
    except OSError as exc:
        return f"no answer ({exc.__class__.__name__})"


def snapshot() -> dict:
    spec = load_yaml(CLUSTER_FILE.read_text())
    name = spec["name"]
    login = spec.get("login", {})
    address, login_port = login.get("address", "127.0.0.1"), login.get("port", 2222)
    prometheus = spec.get("metrics", {}).get("prometheus", {}).get("port", 9090)
    client = docker.from_env()
    label = f"com.docker.compose.project={name}"
    containers = {}
    for c in client.containers.list(all=True, filters={"label": label}):
        state = c.attrs["State"]
        containers[c.name] = {
            "id": c.id,
            "image": c.attrs["Image"],
            "status": state["Status"],
            "started": state["StartedAt"],
            "restarts": c.attrs["RestartCount"],
        }
    controller = next(
        (c for c in client.containers.list(filters={"label": label}) if "slurmctld" in c.name),
        None,
    )
    nodes = "no slurmctld"
    if controller is not None:
        code, out = controller.exec_run(["sinfo", "-h", "-N", "-o", "%N %t"])
        nodes = out.decode().strip() if code == 0 else f"sinfo exited {code}"
    secrets = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(_state_dir(name).glob("*"))
        if p.is_file()
    }
    return {
        "containers": containers,
        "volumes": sorted(v.name for v in client.volumes.list(filters={"label": label})),
        "networks": sorted(n.id for n in client.networks.list(filters={"label": label})),
        "secrets": secrets,
        "nodes": nodes,
        "login": _answers(address, login_port, "ssh"),
        "prometheus": _answers(address, prometheus, "/-/ready"),
    }


def differences(before: dict, after: dict) -> list[str]:
    out = [f"{k}: {before[k]!r} -> {after.get(k)!r}" for k in before if before[k] != after.get(k)]
    if not before["containers"]:
        out.append("the shipped cluster was not running when the snapshot was taken")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("snapshot", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, path = argv[0], Path(argv[1])
    now = snapshot()
    if mode == "snapshot":
        path.write_text(json.dumps(now, indent=1, sort_keys=True))
        running = sum(c["status"] == "running" for c in now["containers"].values())
        print(f"shipped cluster: {running} containers running, nodes: {now['nodes']!r}")
        return 0 if now["containers"] else 1
    found = differences(json.loads(path.read_text()), now)
    for line in found:
        print(f"shipped cluster changed during the tests: {line}", file=sys.stderr)
    if not found:
        print(f"shipped cluster: untouched ({len(now['containers'])} containers)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
