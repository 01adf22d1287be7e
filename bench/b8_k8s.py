"""B8: the k8s target on ../shared/k8s-lab against the local target, in the same run.

The shipped cluster (two 1-CPU nodes, overcommitted on the 2-core lab node) deployed from warm
images: `invoke deploy` (Docker Compose) and `invoke deploy --target k8s` (a fresh lab: API
server, kubelet on this host's Docker, hostPath PVs), each timed from the command's start until it
returns with every node idle; on k8s also without accounting and REST, first, in a namespace
deleted before the measured one starts. Then, on each target, a node deleted (container removed,
or pod deleted) and timed until Slurm has it idle again; and `invoke scale cpu=3`, timed until it
returns with the new node idle (on k8s, the running pods re-read the config without being replaced).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from subprocess import PIPE

import yaml

from bench.common import ROOT, free_ports, invoke
from tests.k8s import lab

INVOKE = (str(ROOT / ".venv/bin/python"), "-m", "invoke", "--search-root", str(ROOT))


def cluster_file(root: Path, name: str, accounting: bool = True) -> Path:
    """The shipped cluster (accounting and REST on, as shipped, unless ``accounting`` is
    false), its ports free on this host."""
    root.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
    data.update(
        name=name,
        rest={"enabled": accounting},
        kubernetes={"overcommit": True, "login_service": "ClusterIP"},
    )
    if not accounting:
        data["accounting"] = {"enabled": False}
    (root / "layers").symlink_to(ROOT / "deploy" / "layers")
    (root / "cluster.yaml").write_text(yaml.safe_dump(free_ports(data)))
    return root / "cluster.yaml"


def idle_after(sinfo, node: str) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < 300:
        if sinfo(node) == "idle":
            return time.perf_counter() - start
        time.sleep(0.5)
    raise TimeoutError(f"{node} not idle after 300 s")


def local_figures(root: Path) -> tuple[float, float, float]:
    where = ["--cluster", str(cluster_file(root, "sfbench8")), "--out", str(root / "out")]
    os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
    try:
        deploy = invoke("deploy", *where)

        def sinfo(node: str) -> str:
            argv = ["sinfo", "-h", "-n", node, "-o", "%t"]
            out = subprocess.run(
                ["docker", "exec", "sfbench8_slurmctld_1", *argv], capture_output=True, text=True
            )
            return out.stdout.strip()

        subprocess.run(["docker", "rm", "-f", "sfbench8_cpu-1_1"], check=True, capture_output=True)
        start = time.perf_counter()
        invoke("deploy", *where)  # brings the node back
        back = time.perf_counter() - start + idle_after(sinfo, "cpu-1")
        start = time.perf_counter()
        invoke("scale", "cpu=3", *where)
        scale = time.perf_counter() - start
        assert sinfo("cpu-2") == "idle"
    finally:
        invoke("down", "--volumes", *where)
    return deploy, back, scale


def k8s_deploy(root: Path, name: str, env: dict[str, str], accounting: bool = True) -> float:
    """Seconds of `invoke deploy --target k8s` of a new cluster ``name`` (its PVs made first)."""
    manifest, _ = lab.volumes(root / name, name, {})
    subprocess.run([lab.KUBECTL, "apply", "-f", str(manifest)], env=env, check=True, stdout=PIPE)
    where = ["--cluster", str(cluster_file(root / name, name, accounting))]
    start = time.perf_counter()
    subprocess.run(
        [*INVOKE, "deploy", "--target", "k8s", "--timeout", "300", *where, "--out", str(root)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def k8s_figures(root: Path) -> tuple[float, float, float, float]:
    """The k8s figures, and first the deploy of the same cluster without accounting and REST
    (in a namespace deleted before the measured one starts)."""
    name = "sfbench8k"
    env = lab.start()

    def kubectl(*args: str) -> str:
        argv = [lab.KUBECTL, "--namespace", name, *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True).stdout.strip()

    try:
        without = k8s_deploy(root, "sfbench8n", env, accounting=False)
        subprocess.run(
            [lab.KUBECTL, "delete", "namespace", "sfbench8n", "--wait=true"],
            env=env,
            check=True,
            stdout=PIPE,
        )
        deploy = k8s_deploy(root, name, env)
        where = ["--cluster", str(root / name / "cluster.yaml"), "--out", str(root)]

        def sinfo(node: str) -> str:
            argv = ["sinfo", "-h", "-n", node, "-o", "%t"]
            return kubectl("exec", "slurmctld-0", "-c", "slurmctld", "--", *argv)

        start = time.perf_counter()
        kubectl("delete", "pod", "cpu-1")
        back = time.perf_counter() - start + idle_after(sinfo, "cpu-1")
        start = time.perf_counter()
        subprocess.run(
            [*INVOKE, "scale", "cpu=3", "--target", "k8s", "--timeout", "300", *where],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        scale = time.perf_counter() - start
        assert sinfo("cpu-2") == "idle"
    finally:
        lab.recipe("down")
    return deploy, back, scale, without


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        local_deploy, local_back, local_scale = local_figures(Path(tmp) / "local")
    with tempfile.TemporaryDirectory() as tmp:
        k8s_on, k8s_back, k8s_scale, k8s_off = k8s_figures(Path(tmp) / "k8s")
    print(
        f"deploy to all nodes idle: local {local_deploy:.1f} s, k8s (lab) {k8s_on:.1f} s "
        f"(ratio k8s/local {k8s_on / local_deploy:.2f})"
    )
    print(
        f"k8s deploy with accounting and REST {k8s_on:.1f} s, without {k8s_off:.1f} s "
        f"(ratio on/off {k8s_on / k8s_off:.2f})"
    )
    print(
        f"node removed -> idle again: local {local_back:.1f} s, k8s pod deleted {k8s_back:.1f} s "
        f"(ratio {k8s_back / local_back:.2f})"
    )
    print(
        f"scale cpu 2 -> 3 until idle: local {local_scale:.1f} s, k8s {k8s_scale:.1f} s "
        f"(ratio {k8s_scale / local_scale:.2f})"
    )


if __name__ == "__main__":
    main()
