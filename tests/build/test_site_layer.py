"""A site layer on a copy of the project (its own registry, so the project's tags stay): a Debian
package added to the jail and a pip requirement (hash-pinned) to the worker rebuild those two
alone, a second build is a no-op, the package is on every node through the jail, the plan names
the site input that changed, and a requirement whose hash does not match is refused before
anything is built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import copy_project
from tests.build.helpers import REGISTRY, WHEEL_SHA256, build_summary, run_build, site_layer_copy
from tests.common import dump_yaml, load_yaml
from tests.ports import published


def run_invoke(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(root), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "SLURMFORGE_DEBUG": "", "SLURMFORGE_STATE_DIR": str(root / "state")},
    )


def _plan(root: Path) -> dict[str, str]:
    out = run_invoke(root, "plan").stdout
    return {ln.split()[0].split("/")[0]: ln for ln in out.splitlines()[2:] if ln.strip()}


def test_a_site_layer_rebuilds_what_it_touches_and_reaches_every_node(
    tmp_path: Path, images, client
) -> None:
    root = copy_project(tmp_path)
    data = load_yaml((root / "versions.yaml").read_text())
    data["sets"]["default"]["registry"] = REGISTRY
    (root / "versions.yaml").write_text(dump_yaml(data, sort_keys=False))
    try:
        first = run_build(root)
        assert first.returncode == 0, first.stderr
        site_layer_copy(root, WHEEL_SHA256)
        data["site"] = "site"
        (root / "versions.yaml").write_text(dump_yaml(data, sort_keys=False))
        plan = _plan(root)
        assert "changed: site" in plan["jail"] and "changed: site" in plan["worker"]
        assert " cached " in plan["login"] and " cached " in plan["slurmd"]

        layered = run_build(root)
        assert layered.returncode == 0, layered.stderr
        status = build_summary(root)
        assert {c for c, s in status.items() if s == "built"} == {"jail", "worker"}, status
        assert {s for c, s in status.items() if c not in ("jail", "worker")} == {"cached"}
        again = run_build(root)
        assert again.returncode == 0, again.stderr
        rows = json.loads((root / ".cache/logs/latest/summary.json").read_text())
        assert {r["note"].split(";")[0] for r in rows} == {"unchanged since last build"}

        jail = f"{REGISTRY}/jail:24.05.8-cuda12.2.2-debian12"
        worker = f"{REGISTRY}/worker:24.05.8-cuda12.2.2-debian12"
        out = client.containers.run(
            jail, ["sh", "-c", "tree --version; cat /etc/site-release"], entrypoint=[], remove=True
        )
        assert out.decode().split()[0] == "tree" and out.decode().split()[-1] == "ours"
        out = client.containers.run(
            worker, ["python3", "-c", "import tomli_w; print('ok')"], entrypoint=[], remove=True
        )
        assert out.decode().strip() == "ok"

        _on_every_node(root, client)

        # one file of the layer changed: the plan names it, for the jail alone
        (root / "site" / "files" / "etc" / "site-release").write_text("ours, again\n")
        plan = _plan(root)
        assert "changed: site:files:files/etc/site-release" in plan["jail"], plan["jail"]
        assert " cached " in plan["worker"]
        # a requirement whose hash does not match: refused before anything is built
        tags = {ref: client.images.get(ref).id for ref in (jail, worker)}
        site_layer_copy(root, "0" * 64)
        bad = run_build(root)
        assert bad.returncode == 2, bad.stderr
        assert bad.stderr.startswith("error: ") and "worker.txt: pip download" in bad.stderr
        assert "Traceback" not in bad.stderr
        assert {ref: client.images.get(ref).id for ref in tags} == tags
    finally:
        for image in client.images.list(name=f"{REGISTRY}/*"):
            for tag in image.tags:
                if tag.startswith(REGISTRY):
                    client.images.remove(tag, noprune=True)


def _on_every_node(root: Path, client) -> None:
    """A cluster of the layered images: the jail's new package runs on each node."""
    name = f"sfsite{os.getpid() % 100000}"
    cluster = root / "cluster.yaml"
    cluster.write_text(
        dump_yaml(
            {
                "name": name,
                **published(),
                "accounting": {"enabled": False},
                "rest": {"enabled": False},
                "nodesets": [
                    {
                        "name": "cpu",
                        "replicas": 2,
                        "image": "slurmd",
                        "cpus": 1,
                        "memory_mb": 1024,
                        "capabilities": ["SYS_ADMIN"],
                    }
                ],
                "partitions": [{"name": "main", "nodesets": ["cpu"], "default": True}],
            }
        )
    )
    where = ["--cluster", str(cluster), "--out", str(root / "out")]
    try:
        proc = run_invoke(root, "deploy", *where)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        labels = [f"com.docker.compose.project={name}", "com.docker.compose.service=login"]
        (login,) = client.containers.list(filters={"label": labels})
        step = "srun -N2 bash -c 'echo $(hostname) $(tree --version | cut -d\" \" -f1)'"
        code, out = login.exec_run(["chroot", "/jail", "bash", "-lc", step])
        lines = sorted(out.decode().splitlines())
        assert code == 0 and lines == ["cpu-0 tree", "cpu-1 tree"], out.decode()
    finally:
        run_invoke(root, "down", "--volumes", *where)
