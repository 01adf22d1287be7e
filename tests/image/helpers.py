"""What the image tier's tests share: reading an image's layers, the files no layer may hold,
and a stand-in GPU driver mounted as a GPU node mounts one."""

from __future__ import annotations

import io
import re
import tarfile

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


def layer_files(client: docker.DockerClient, ref: str) -> set[str]:
    """Every path in every layer of ``ref`` (including files later deleted)."""
    names: set[str] = set()
    stream = io.BufferedReader(Chunks(client.images.get(ref).save(named=False)))
    with tarfile.open(fileobj=stream, mode="r|") as outer:
        for member in outer:
            if member.name.endswith("layer.tar") and member.isfile():
                inner = outer.extractfile(member)
                assert inner is not None
                with tarfile.open(fileobj=inner, mode="r|") as layer:
                    names.update(m.name for m in layer)
    return names


class Chunks(io.RawIOBase):
    def __init__(self, chunks) -> None:
        self._it, self._buf = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, out) -> int:
        while not self._buf:
            try:
                self._buf = next(self._it)
            except StopIteration:
                return 0
        n = min(len(out), len(self._buf))
        out[:n], self._buf = self._buf[:n], self._buf[n:]
        return n


# secrets are given at run time only: none of them, nor a file holding one, is in a layer
SECRET_FILES = ("munge.key", "jwt_hs256.key", "db-password", "slurmdbd.conf")
