"""A cluster a test deploys: the default cluster with a test's changes, under a throwaway name,
port and state directory (Clusters.deploy), and what a test does with it (Deployed)."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from slurmforge.exec_kept import exec_kept
from tests.common import ROOT, TEST_CELLS, TEST_SET, dump_yaml, load_yaml
from tests.ports import free_port, published


@dataclass
class Deployed:
    name: str
    root: Path  # cluster file, layers and manifests live here
    env: dict[str, str]
    client: docker.DockerClient

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.yaml"

    @property
    def rest_url(self) -> str:
        """slurmrestd, through the port the cluster publishes on the host."""
        data = load_yaml(self.cluster_file.read_text())
        return f"http://127.0.0.1:{data['rest']['port']}"

    @property
    def login_port(self) -> int:
        """The login node's sshd, as the cluster publishes it on the host."""
        return int(load_yaml(self.cluster_file.read_text())["login"]["port"])

    def invoke(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """An `invoke` task on this cluster (its cluster file and manifest directory)."""
        where = ["--cluster", str(self.cluster_file), "--out", str(self.root / "out")]
        return invoke(self.env, *args, *where, stdin=stdin)

    def container(self, service: str):
        found = self.client.containers.list(
            all=True,
            filters={
                "label": [
                    f"com.docker.compose.project={self.name}",
                    f"com.docker.compose.service={service}",
                ]
            },
        )
        assert found, f"no container for {service}"
        return found[0]

    def sh(
        self, service: str, command: str, user: str | None = None, timeout: int = 300
    ) -> tuple[int, str]:
        """``command`` in a service's container; with ``user``, inside the jail as that user.
        Killed after ``timeout`` seconds (exit 124): a job that hangs fails its test. Its output
        survives Docker losing an exec's stream (``slurmforge.exec_kept``)."""
        if user is not None:
            command = f"chroot /jail su - {user} -c {shlex.quote(command)}"
        argv = ["timeout", "-k", "5", str(timeout), "bash", "-c", command]
        code, out = exec_kept(self.container(service), argv)
        return code, out.strip()

    def ok(self, service: str, command: str, user: str | None = None) -> str:
        code, out = self.sh(service, command, user)
        assert code == 0, f"{command!r} on {service} exited {code}:\n{out}"
        return out

    def user(self, name: str, *options: str) -> str:
        """A jail user made with createuser on the login node (one that exists already is
        fine); createuser's output."""
        argv = shlex.join(["chroot", "/jail", "createuser", "--non-interactive", name, *options])
        code, out = self.sh("login", argv)
        assert code == 0 or "already exists" in out, out
        return out

    def states(self) -> dict[str, str]:
        out = self.ok("slurmctld", "sinfo -h -N -o '%N %t'")
        return dict(line.split() for line in out.splitlines())

    def wait_states(self, want: dict[str, str], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            code, out = self.sh("slurmctld", "sinfo -h -N -o '%N %t'")
            states = dict(line.split() for line in out.splitlines()) if code == 0 else {}
            if all(states.get(node) == state for node, state in want.items()):
                return
            time.sleep(2)
        pytest.fail(f"wanted {want}, Slurm says {states}")


def invoke(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args],
        input=stdin,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def write_cluster(root: Path, name: str, port: int, **changes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "layers").exists():
        shutil.copytree(ROOT / "deploy" / "layers", root / "layers")
    data = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())
    # The cell under test (`invoke test-cluster --set S --cell C`), else the file's own choice.
    if TEST_CELLS or TEST_SET != "default":
        data["images"] = {"set": TEST_SET, **({"cell": TEST_CELLS[0]} if TEST_CELLS else {})}
    # clusters of one run side by side, and beside README's own; a test's portal settings keep
    # the free port picked with the others
    ports = published(port)
    portal = {**ports["portal"], **changes.pop("portal", {})}
    data.update({"name": name, **ports, **changes, "portal": portal})
    path = root / "cluster.yaml"
    path.write_text(dump_yaml(data, sort_keys=False))
    return path


class Clusters:
    """The tier's one way to a cluster of its own: ``deploy`` brings up the default cluster with
    ``changes`` under a throwaway name, port and state directory (in ``root``, or a fresh
    directory), and every cluster it made is removed, with its volumes, when the fixture that
    holds it ends."""

    def __init__(
        self,
        client: docker.DockerClient,
        tmp_path_factory: pytest.TempPathFactory,
        stack: contextlib.ExitStack,
    ) -> None:
        self.client = client
        self.tmp_path_factory = tmp_path_factory
        self.stack = stack

    def root(self, name: str) -> Path:
        """A fresh directory for a cluster's files (cluster file, layers, site files)."""
        return self.tmp_path_factory.mktemp(name)

    def deploy(self, prefix: str, root: Path | None = None, **changes) -> Deployed:
        where = root if root is not None else self.root(prefix)
        return self.stack.enter_context(deploy(where, prefix, self.client, **changes))


@contextlib.contextmanager
def deploy(root: Path, prefix: str, client: docker.DockerClient, **changes) -> Iterator[Deployed]:
    """A cluster (the default one, with ``changes``) deployed under a throwaway name, port and
    state directory; removed with its volumes afterwards."""
    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "SLURMFORGE_STATE_DIR": str(root / "state"), "SLURMFORGE_DEBUG": ""}
    write_cluster(root, name, free_port(), **changes)
    cluster = Deployed(name, root, env, client)
    proc = cluster.invoke("deploy")
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield cluster
    finally:
        cluster.invoke("down", "--volumes")


def squashfs_image(
    cluster: Deployed,
    images: dict[str, str],
    client: docker.DockerClient,
    user: str,
    mark: str,
    platform: str = "linux/amd64",
) -> str:
    """~user/os.sqsh in the jail, owned by ``user``: a small image built here from the cell's base
    image (of ``platform``) with ``mark`` as the ID= of its os-release (the jail says debian),
    exported with `docker export` and packed with the jail's mksquashfs, as a user makes one
    from a local image without a registry. Uncompressed: gzip, mksquashfs' default, took 31
    CPU-seconds for these 141 MB, against under one, and enroot unpacks it on every node of
    every step."""
    dockerfile = (
        f"FROM {images['base']}\n"
        f"RUN rm -f /etc/os-release && printf 'ID={mark}\\nPRETTY_NAME=\"{mark}\"\\n'"
        " > /etc/os-release\n"
    )
    tag = f"{cluster.name}-ctr:latest"
    subprocess.run(["docker", "build", "-q", "--platform", platform, "-t", tag, "-"],
                   input=dockerfile, text=True, check=True, capture_output=True)  # fmt: skip
    made = client.containers.create(tag, command=["true"])
    login = cluster.container("login").id
    try:
        export = subprocess.Popen(["docker", "export", made.id], stdout=subprocess.PIPE)
        unpack = "rm -rf /jail/root/ctr && mkdir -p /jail/root/ctr && tar -xf - -C /jail/root/ctr"
        subprocess.run(["docker", "exec", "-i", login, "sh", "-c", unpack],
                       stdin=export.stdout, check=True, capture_output=True)  # fmt: skip
        assert export.wait() == 0
    finally:
        made.remove()
        client.images.remove(tag)
    home = cluster.ok("login", f"chroot /jail getent passwd {user}").split(":")[5]
    pack = (
        f"mksquashfs /root/ctr {home}/os.sqsh -noappend -all-root -quiet -noI -noD -noF -noX"
        f" && chown {user}: {home}/os.sqsh && rm -rf /root/ctr"
    )
    cluster.ok("login", f"chroot /jail sh -c {shlex.quote(pack)}")
    return f"{home}/os.sqsh"
