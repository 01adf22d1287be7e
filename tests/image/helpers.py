"""What the image tier's tests share: reading an image's layers, the files no layer may hold,
and a stand-in GPU driver mounted as a GPU node mounts one."""

from __future__ import annotations

import json
import posixpath
import re
import subprocess
import tarfile
from collections.abc import Iterable
from typing import IO

import docker


def mount_standin_driver(client, image: str, tmp_path, arch: str) -> str:
    """What the worker ``image`` says once the entrypoint has mounted an ``arch`` host's
    stand-in driver; the checks every arch shares are made here."""
    from tests import driver_root

    root = driver_root.make(tmp_path / "node", devices=False, arch=arch)
    mounted = "/run/nvidia/driver"
    volumes = {
        str(root / sub): {"bind": f"{mounted}/{sub}", "mode": "ro"}
        for sub in (driver_root.ARCHES[arch][0], "usr/bin")
    }
    volumes[str(root / "proc/driver/nvidia/version")] = {"bind": "/run/version", "mode": "ro"}
    lib = f"/usr/local/nvidia/lib64/libcuda.so.{driver_root.VERSION}"
    script = "; ".join(
        [
            "ldconfig -p | grep -F 'libcuda.so.1 '",
            "ls /usr/local/nvidia/lib64",
            f"findmnt -no OPTIONS {lib}",
            f"echo x >> {lib} 2>&1 || true",
            "/usr/local/nvidia/bin/nvidia-smi -L",
        ]
    )
    out = client.containers.run(
        image,
        ["bash", "-c", script],
        environment={
            "SLURMFORGE_DRIVER_ROOT": mounted,
            "SLURMFORGE_DRIVER_VERSION_FILE": "/run/version",
        },
        volumes=volumes,
        cap_add=["SYS_ADMIN"],
        security_opt=["apparmor:unconfined"],
        platform=f"linux/{arch}",
        remove=True,
        stderr=True,
    ).decode()
    assert f"libcuda.so.{driver_root.VERSION}" in out and driver_root.OLD_VERSION not in out, out
    options = re.search(r"^(ro,\S+)$", out, re.M)
    assert options and {"ro", "nosuid", "nodev"} <= set(options.group(1).split(",")), out
    assert "Read-only file system" in out, out
    assert "GPU 0" in out, out
    return out


# Slurm's clients refuse to start without a configuration, even for -V; a stub one is enough.
STUB_CONF = (
    "printf 'ClusterName=t\\nSlurmctldHost=localhost\\n' > /tmp/s.conf; SLURM_CONF=/tmp/s.conf"
)


def layer_files(client: docker.DockerClient, refs: Iterable[str]) -> dict[str, set[str]]:
    """Every path in every layer of each of ``refs`` (including files later deleted), from one
    `docker save` of them all: a layer they share is read once (the images of a cell share
    their base, runtime and more), and the archive streams from the CLI straight into tarfile."""
    refs = list(dict.fromkeys(refs))
    ids = {ref: client.images.get(ref).id.removeprefix("sha256:") for ref in refs}
    layers: dict[str, set[str]] = {}
    links: dict[str, str] = {}  # a layer saved once for two images: the second is a link
    manifest: list[dict] = []
    save = subprocess.Popen(["docker", "save", *refs], stdout=subprocess.PIPE)
    assert save.stdout is not None
    with save:
        with tarfile.open(fileobj=save.stdout, mode="r|") as outer:
            for member in outer:
                # <id>/layer.tar (Docker 20.10), or blobs/sha256/<digest> (OCI, Docker 25 on)
                blob = member.name.endswith("/layer.tar") or member.name.startswith("blobs/")
                if blob and member.issym():
                    links[member.name] = posixpath.join(
                        posixpath.dirname(member.name), member.linkname
                    )
                elif blob and member.isfile():
                    layers.update(_names(member.name, outer.extractfile(member)))
                elif member.name == "manifest.json":
                    manifest = json.load(outer.extractfile(member))  # type: ignore[arg-type]
        save.stdout.read()  # the archive's padding: docker save ends on its own
    assert save.returncode == 0, f"docker save {' '.join(refs)} failed"
    for name, target in links.items():
        layers[name] = layers[posixpath.normpath(target)]
    by_id = {
        posixpath.basename(entry["Config"]).removesuffix(".json"): set().union(
            *(layers[name] for name in entry["Layers"])
        )
        for entry in manifest
    }
    return {ref: by_id[ids[ref]] for ref in refs}


def _names(name: str, blob: IO[bytes] | None) -> dict[str, set[str]]:
    """{name: the paths in it} for a layer; nothing for another blob (a config, a manifest)."""
    assert blob is not None
    try:
        with tarfile.open(fileobj=blob, mode="r|") as layer:
            return {name: {m.name for m in layer}}
    except tarfile.ReadError:
        return {}


# secrets are given at run time only: none of them, nor a file holding one, is in a layer
SECRET_FILES = ("munge.key", "jwt_hs256.key", "db-password", "slurmdbd.conf")
