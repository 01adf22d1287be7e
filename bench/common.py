"""Helpers shared by the benchmarks: run `invoke` on a project directory and read its summary."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.ports import published

ROOT = Path(__file__).resolve().parents[1]


class InvokeFailed(RuntimeError):
    """An `invoke` a benchmark ran failed; the message holds its command and what it said."""


def invoke(*args: str, root: Path = ROOT, quiet: bool = True) -> float:
    """Run ``invoke ARGS`` in ``root``; return wall seconds. A failure raises InvokeFailed with
    its `error:` and `hint:` lines (``quiet``: its output is kept from the terminal, not those)."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(root), *args],
        cwd=root,
        stdout=subprocess.DEVNULL if quiet else None,
        stderr=subprocess.PIPE if quiet else None,
        text=True,
        check=False,
    )
    if proc.returncode:
        said = [ln for ln in (proc.stderr or "").splitlines() if ln.startswith(("error:", "hint:"))]
        shown = "\n".join(said or (proc.stderr or "").splitlines()[-5:])
        raise InvokeFailed(f"invoke {' '.join(args)} exited {proc.returncode}\n{shown}".rstrip())
    return time.perf_counter() - start


def free_ports(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a cluster file's) with every port a local cluster publishes a free one, so a
    benchmark's cluster runs beside README's (login 2222, REST 6820, Prometheus 9090)."""
    ports = published()
    metrics = data.get("metrics") or {}
    return {
        **data,
        "login": {**(data.get("login") or {}), **ports["login"]},
        "rest": {**(data.get("rest") or {}), **ports["rest"]},
        "metrics": {
            **metrics,
            "prometheus": {**(metrics.get("prometheus") or {}), **ports["metrics"]["prometheus"]},
        },
    }


def service_container(client: Any, project: str, service: str) -> Any:
    """A local cluster's container of ``service`` (running or not), by its Compose labels."""
    labels = [f"com.docker.compose.project={project}", f"com.docker.compose.service={service}"]
    (found,) = client.containers.list(all=True, filters={"label": labels})
    return found


def container_argv(project: str, service: str, command: str) -> list[str]:
    """``command`` with bash in a local cluster's service container (Compose v1's name)."""
    return ["docker", "exec", f"{project}_{service}_1", "bash", "-c", command]


def container_sh(project: str):
    """sh(service, command) → its stdout, stripped; raises when it fails."""

    def sh(service: str, command: str) -> str:
        argv = container_argv(project, service, command)
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    return sh


def summary(root: Path = ROOT) -> list[dict[str, object]]:
    return json.loads((root / ".cache/logs/latest/summary.json").read_text())


def built(root: Path = ROOT) -> list[str]:
    return [str(r["target"]) for r in summary(root) if r["status"] == "built"]


def copy_project(dest: Path, share_build_lock: bool = False) -> Path:
    """A copy of the project's inputs in ``dest`` that shares the source cache (no re-download);
    ``share_build_lock``: and the checkout's build lock, for a copy that builds targets the
    checkout builds too (another arch's cells, which CI's prebuild makes)."""
    for name in ("images", "jail", "rootfs", "versions.yaml", "tasks.py"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name)
        else:
            shutil.copy2(src, dest / name)
    shared = ROOT / ".cache/sources"
    shared.mkdir(parents=True, exist_ok=True)
    (dest / ".cache").mkdir()
    (dest / ".cache/sources").symlink_to(shared)
    if share_build_lock:
        # one build at a time across the checkout and this copy (slurmforge/buildlock.py): the
        # copy waits for what the checkout is building (CI's prebuild), then finds it cached,
        # rather than compiling the same Slurm beside it and replacing its tags. Any other copy
        # keeps a lock of its own: sharing it would hold a copy's quick build behind the
        # prebuild's whole compile of an unrelated cell.
        (dest / ".cache/build.lock").symlink_to(ROOT / ".cache/build.lock")
    return dest
