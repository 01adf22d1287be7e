"""Kubernetes tier: the default cluster deployed with `invoke deploy --target k8s` on a real API
server and kubelet.

The server is the one KUBECONFIG names (context SLURMFORGE_K8S_CONTEXT, else its current one), or,
when KUBECONFIG is unset, the lab of ../shared/k8s-lab (Kubernetes 1.20 from Debian's archive,
pods on this host's Docker): its binaries are built once per machine under
~/.cache/k8s-lab (.ci/run starts that build early, beside the image builds; a build in
progress is waited for), and it is started fresh for the session and stopped after it. On the
lab, the tier also makes what a real cluster provides: hostPath PersistentVolumes for the claims.
Images come from this host's Docker (the lab has no registry).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.browser import browser, browsers  # noqa: F401 (the portal test's fixtures)
from tests.common import ROOT
from tests.k8s import lab

INVOKE = (sys.executable, "-m", "invoke", "--search-root", str(ROOT))


@dataclass
class Kube:
    """kubectl against the tier's server, in one namespace."""

    env: dict[str, str]
    context: str | None
    namespace: str = ""
    lab: bool = False
    made: list[str] = field(default_factory=list)  # cluster-scoped objects made for the tier

    def run(
        self, *args: str, check: bool = True, namespaced: bool = True, stdin: str | None = None
    ) -> str:
        argv = [lab.KUBECTL, *(["--context", self.context] if self.context else [])]
        if namespaced:
            argv += ["--namespace", self.namespace]
        proc = subprocess.run(
            [*argv, *args], input=stdin, env=self.env, capture_output=True, text=True, timeout=300
        )
        if check and proc.returncode:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr or proc.stdout}")
        return proc.stdout.strip()

    def sh(self, pod: str, container: str, command: str, user: str | None = None) -> str:
        """``command`` in a pod's container; with ``user``, inside the jail as that user."""
        argv = ["bash", "-c", command]
        if user:
            argv = ["chroot", "/jail", "su", "-", user, "-c", command]
        return self.run("exec", pod, "-c", container, "--", *argv)

    @contextlib.contextmanager
    def in_namespace(self, namespace: str) -> Iterator[None]:
        """This object's commands in ``namespace`` for the block (a restore's target)."""
        was, self.namespace = self.namespace, namespace
        try:
            yield
        finally:
            self.namespace = was

    def metrics(self, token: bool = True) -> str:
        """The exporter's page, from its Service's endpoint as a plain Prometheus scrapes it
        (kubernetes_sd, role endpoints: the annotations name the port and path), with the
        cluster's metrics token from its Secret as the site's Prometheus is given it (without:
        what anyone else gets, an HTTPError)."""
        annotations = json.loads(
            self.run("get", "service", "exporter", "-o", "jsonpath={.metadata.annotations}")
        )
        assert annotations["prometheus.io/scrape"] == "true", annotations
        port, path = annotations["prometheus.io/port"], annotations["prometheus.io/path"]
        addresses = self.run("get", "endpoints", "exporter", "-o", "jsonpath={..addresses[*].ip}")
        (address,) = addresses.split()
        request = urllib.request.Request(f"http://{address}:{port}{path}")
        if token:
            key = "jsonpath={.data.metrics-token}"
            data = base64.b64decode(self.run("get", "secret", "metrics-token", "-o", key))
            request.add_header("Authorization", f"Bearer {data.decode()}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read().decode()

    def pod_ip(self, pod: str) -> str:
        return self.run("get", "pod", pod, "-o", "jsonpath={.status.podIP}", check=False)

    def states(self) -> dict[str, str]:
        out = self.sh("slurmctld-0", "slurmctld", "sinfo -h -N -o '%N %t'")
        return dict(line.split() for line in out.splitlines())

    def wait_states(self, want: dict[str, str], timeout: float = 120) -> float:
        start = time.monotonic()
        states: dict[str, str] = {}
        while time.monotonic() - start < timeout:
            try:
                states = self.states()
            except AssertionError:
                states = {}
            if all(states.get(n) == s for n, s in want.items()):
                return time.monotonic() - start
            time.sleep(1)
        # the reasons a node is out of service, which name the cause when this fails on CI
        reasons = self.run("exec", "slurmctld-0", "-c", "slurmctld", "--", "sinfo", "-R",
                           "-o", "%N %t %E %H", check=False)  # fmt: skip
        pytest.fail(f"wanted {want}, Slurm says {states}; sinfo -R: {reasons}")


@pytest.fixture(scope="session")
def kube() -> Iterator[Kube]:
    if os.environ.get("KUBECONFIG"):
        yield Kube(dict(os.environ), os.environ.get("SLURMFORGE_K8S_CONTEXT"))
        return
    if not lab.RECIPE.exists():
        pytest.fail(f"no Kubernetes for this tier: set KUBECONFIG, or provide {lab.RECIPE}")
    try:
        yield Kube(lab.start(), None, lab=True)
    finally:
        lab.recipe("down")


@dataclass
class K8sCluster:
    kube: Kube
    root: Path
    env: dict[str, str]

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.yaml"

    def data(self) -> dict:
        return yaml.safe_load(self.cluster_file.read_text())

    def write(self, data: dict) -> None:
        self.cluster_file.write_text(yaml.safe_dump(data, sort_keys=False))

    def deploy(self) -> subprocess.CompletedProcess[str]:
        return self.invoke("deploy")

    def task(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`invoke ARGS --target k8s` on this cluster's file, the rest as given."""
        where = ["--target", "k8s", "--cluster", str(self.cluster_file)]
        context = ["--context", self.kube.context] if self.kube.context else []
        return subprocess.run([*INVOKE, *args, *where, *context], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=1200)  # fmt: skip

    def invoke(self, task: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`invoke TASK --target k8s` on this cluster's file, with a 300 s bound per wait."""
        return self.task(task, "--timeout", "300", "--out", str(self.root / "out"), *args)


@pytest.fixture(scope="module")
def k8s_cluster(
    kube: Kube, images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[K8sCluster]:
    """The shipped cluster under a throwaway name (= its namespace), nodes overcommitted so that
    both fit a 2-core lab node."""
    root = tmp_path_factory.mktemp("k8s")
    name = f"sfk8s{uuid.uuid4().hex[:6]}"
    shutil.copytree(ROOT / "deploy" / "layers", root / "layers")
    data = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
    data.update(name=name, kubernetes={"overcommit": True, "login_service": "ClusterIP"})
    if kube.lab:
        manifest, names = lab.volumes(root, name, data["kubernetes"])
        kube.run("apply", "-f", str(manifest), namespaced=False)
        kube.made += [f"persistentvolume/{n}" for n in names]
    kube.namespace = name
    env = {**kube.env, "SLURMFORGE_DEBUG": "", "SLURMFORGE_STATE_DIR": str(root / "state")}
    cluster = K8sCluster(kube, root, env)
    cluster.write(data)
    try:
        yield cluster
    finally:
        kube.run("delete", "namespace", name, "--wait=false", check=False, namespaced=False)
        for obj in kube.made:
            kube.run("delete", obj, "--wait=false", check=False, namespaced=False)
