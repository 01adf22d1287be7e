"""The Kubernetes tier's server and a cluster deployed on it: kubectl in the tier's namespace
(Kube), the cluster's file and tasks (K8sCluster), and what a user does there (submit, sacct)."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.common import ROOT, dump_yaml, load_yaml
from tests.k8s import lab

# the states of a job that has not ended
LIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"}
INVOKE = (sys.executable, "-m", "invoke", "--search-root", str(ROOT))


@dataclass
class Kube:
    """kubectl against the tier's server, in one namespace."""

    env: dict[str, str]
    context: str | None
    namespace: str = ""
    lab: bool = False
    made: list[str] = field(default_factory=list)  # cluster-scoped objects made for the tier

    def proc(
        self, *args: str, namespaced: bool = True, stdin: str | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        argv = [lab.KUBECTL, *(["--context", self.context] if self.context else [])]
        if namespaced:
            argv += ["--namespace", self.namespace]
        return subprocess.run(
            [*argv, *args], input=stdin, env=self.env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def run(
        self, *args: str, check: bool = True, namespaced: bool = True, stdin: str | None = None
    ) -> str:
        proc = self.proc(*args, namespaced=namespaced, stdin=stdin)
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
        """Seconds until Slurm shows each node of ``want`` in its state. The polling runs in
        the controller's pod, one `kubectl exec` for the whole wait (one a second cost the host
        a kubectl process each, beside the pods it waits for); a pod that is not there yet or
        was replaced is asked again."""
        start = time.monotonic()
        pairs = " ".join(shlex.quote(f"{node} {state}") for node, state in want.items())
        states: dict[str, str] = {}
        while (left := timeout - (time.monotonic() - start)) > 0:
            script = (
                f"end=$((SECONDS + {max(1, int(left))})); while :; do "
                "out=$(sinfo -h -N -o '%N %t' 2>&1); ok=1; "
                f'for p in {pairs}; do grep -qxF "$p" <<< "$out" || ok=0; done; '
                '[ $ok = 1 ] && exit 0; [ $SECONDS -ge $end ] && { echo "$out"; exit 3; }; '
                "sleep 1; done"
            )
            argv = ["exec", "slurmctld-0", "-c", "slurmctld", "--", "bash", "-c", script]
            proc = self.proc(*argv, timeout=left + 60)
            if proc.returncode == 0:
                return time.monotonic() - start
            if proc.returncode == 3:  # the wait's end, with what Slurm said last
                lines = [ln.split() for ln in proc.stdout.splitlines()]
                states = {ln[0]: ln[1] for ln in lines if len(ln) == 2}
                break
            time.sleep(1)  # no controller pod to run in yet (or a new one)
        # the reasons a node is out of service, which name the cause when this fails on CI
        reasons = self.run("exec", "slurmctld-0", "-c", "slurmctld", "--", "sinfo", "-R",
                           "-o", "%N %t %E %H", check=False)  # fmt: skip
        pytest.fail(f"wanted {want}, Slurm says {states}; sinfo -R: {reasons}")


@dataclass
class K8sCluster:
    kube: Kube
    root: Path
    env: dict[str, str]

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.yaml"

    def data(self) -> dict:
        return load_yaml(self.cluster_file.read_text())

    def write(self, data: dict) -> None:
        self.cluster_file.write_text(dump_yaml(data, sort_keys=False))

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


def sacct(kube, jobs: list[str], timeout: float = 120) -> dict[str, tuple[str, str]]:
    """Job → (State, ExitCode) as alice's sacct says, once it lists every one of ``jobs`` as
    ended (slurmctld sends the records to slurmdbd as jobs start and end)."""
    deadline = time.monotonic() + timeout
    while True:
        out = kube.sh(
            "login-0",
            "login",
            f"sacct -n -P -X -j {','.join(jobs)} -o JobID,State,ExitCode",
            user="alice",
        )
        found = {j: (st, code) for j, st, code in (ln.split("|") for ln in out.splitlines())}
        ended = set(found) >= set(jobs) and not any(st in LIVE for st, _ in found.values())
        if ended or time.monotonic() >= deadline:
            return found
        time.sleep(2)


def submit(kube, options: str) -> str:
    out = kube.sh("login-0", "login", f"cd ~ && sbatch {options}", user="alice")
    return re.search(r"Submitted batch job (\d+)", out).group(1)
