"""What the registry tier's tests share: `invoke` on a copy, a registry's catalog and manifests,
and recording images as tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import docker

from slurmforge import state
from tests.common import ROOT

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    ]
)


def record_tested(work: Path, client: docker.DockerClient, refs: list[str]) -> None:
    """What the image tier does after all its tests passed (tests/image/conftest.py)."""
    state.record_tested(work, [(client.images.get(r).id, r) for r in refs], "tests/image")


def invoke(work: Path, *args: str, env: dict[str, str] | None = None):
    argv = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "push"]
    argv += ["--config", str(work / "versions.yaml"), *args]
    return subprocess.run(
        argv,
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "SLURMFORGE_DEBUG": "", **(env or {})},
        timeout=900,
    )


def manifest(host: str, repo: str, reference: str, auth: str | None = None) -> tuple[str, dict]:
    req = urllib.request.Request(f"http://{host}/v2/{repo}/manifests/{reference}")
    req.add_header("Accept", MANIFEST_TYPES)
    if auth:
        req.add_header("Authorization", f"Basic {auth}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["Docker-Content-Digest"], json.loads(resp.read())


def catalog(host: str) -> list[str]:
    with urllib.request.urlopen(f"http://{host}/v2/_catalog", timeout=10) as resp:
        return json.loads(resp.read())["repositories"]
