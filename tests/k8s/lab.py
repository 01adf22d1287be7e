"""../shared/k8s-lab, for the Kubernetes tier and bench/b8_k8s.py: its recipe, a fresh start, and
the PersistentVolumes that a real cluster's provisioner would make for the claims."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.common import ROOT
from tests.own_network import pump

LAB = Path(os.environ.get("SLURMFORGE_K8S_LAB") or Path.home() / ".cache" / "k8s-lab")
RECIPE = ROOT.parent / "shared" / "k8s-lab" / "recipe.sh"
KUBECTL = str(Path(sys.executable).parent / "kubectl")
# kubernetes.<claim>: access modes, default size (sizes differ: a claim binds the smallest fit)
CLAIMS = (
    ("jail", ("ReadWriteMany",), "50Gi"),
    ("state", ("ReadWriteOnce",), "1Gi"),
    ("database", ("ReadWriteOnce",), "10Gi"),
)
# the state two controllers share (controller.replicas: 2), as a site's NFS export would hold
# it; made beside CLAIMS' for a cluster with a backup controller
SHARED_STATE = ("state", ("ReadWriteMany",), "1Gi")
# kubernetes.backup, when it has a schedule
BACKUP_CLAIM = ("backup", ("ReadWriteOnce",), "20Gi")


def _recipe_env() -> dict[str, str]:
    """What the recipe (and lab-build, which runs it) reads."""
    return {
        **os.environ,
        "LAB": str(LAB),
        "WITH_NODE": "1",
        "KUBECTL": KUBECTL,
        "RECIPE": str(RECIPE),
    }


def recipe(*steps: str) -> None:
    subprocess.run(
        ["bash", str(RECIPE), *steps], env=_recipe_env(), check=True, stdout=subprocess.DEVNULL
    )


def start() -> dict[str, str]:
    """A fresh lab (its binaries built once per machine, or a build in progress waited for);
    the environment whose KUBECONFIG reaches it."""
    LAB.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["flock", str(LAB / ".build.lock"), str(Path(__file__).with_name("lab-build"))],
        env=_recipe_env(),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    recipe("down")
    shutil.rmtree(LAB / "run" / "etcd-data", ignore_errors=True)  # a fresh cluster
    recipe("pki", "up", "node", "dns")
    return {**os.environ, "KUBECONFIG": str(LAB / "run" / "admin.kubeconfig")}


def volumes(
    root: Path, name: str, kubernetes: dict, claims: tuple = CLAIMS
) -> tuple[Path, list[str]]:
    """hostPath PVs (under ``root``) for cluster ``name``'s claims, as a manifest to apply, and
    their names."""
    items, names = [], []
    for claim, modes, default in claims:
        spec = kubernetes.get(claim, {})
        kind = {"storageClassName": spec["storage_class"]} if spec.get("storage_class") else {}
        shared = modes == SHARED_STATE[1] and claim == SHARED_STATE[0]
        path = root / "pv" / f"{claim}{'-shared' * shared}"
        path.mkdir(parents=True)
        names.append(f"{name}-{claim}{'-shared' * shared}")
        items.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": names[-1]},
                "spec": {
                    "capacity": {"storage": spec.get("size", default)},
                    "accessModes": list(modes),
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": str(path), "type": "Directory"},
                    **kind,
                },
            }
        )
    manifest = root / "pvs.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return manifest, names


class ApiForPods:
    """What kube-proxy would do for the one Service pods need to reach the API server: the lab
    has no kube-proxy, and its API server listens on 127.0.0.1 only, so a pod's connection to
    the `kubernetes` Service (10.0.0.1:443, KUBERNETES_SERVICE_HOST) goes nowhere. An iptables
    DNAT rule sends it to a port on docker0's address (the host's side of the pods' bridge),
    where this relays it to the API server; TLS stays end to end (the server's certificate
    names 10.0.0.1). Started by the tests whose pods call the API (node-power)."""

    SERVICE = ("10.0.0.1", 443)

    def __init__(self) -> None:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        self.host = out.split()[3].split("/")[0]
        self.listener = socket.create_server((self.host, 0))
        self.port = self.listener.getsockname()[1]
        api_port = int(os.environ.get("API_PORT", "64430"))
        self.upstream = ("127.0.0.1", api_port)
        self.rule = ["PREROUTING", "-d", f"{self.SERVICE[0]}/32", "-p", "tcp", "--dport",
                     str(self.SERVICE[1]), "-j", "DNAT", "--to-destination",
                     f"{self.host}:{self.port}"]  # fmt: skip

    def __enter__(self) -> ApiForPods:
        subprocess.run(["iptables", "-t", "nat", "-I", *self.rule], check=True)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["iptables", "-t", "nat", "-D", *self.rule], check=False)
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()
