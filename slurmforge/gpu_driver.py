"""Host GPU driver discovery: what a worker (and, through it, the jail) must see of the driver.

Everything is read under a driver root (``/`` on a real host; a directory in tests), and only the
files that belong to the *running* driver are taken: a library counts when its name ends in the
exact version the kernel module reports, so leftovers of other driver versions are ignored (with
a warning), never mounted.

The result is a mount plan (JSON: host path → container path, read-only, plus device nodes) that
the local renderer turns into Compose volumes and devices, and a CDI spec (kind nvidia.com/gpu)
for runtimes that take CDI.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from slurmforge.errors import ConfigError

# Where the driver's files appear inside a worker (and, projected, inside the jail).
CONTAINER_LIB = "/usr/local/nvidia/lib64"
CONTAINER_BIN = "/usr/local/nvidia/bin"
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")
CDI_VERSION = "0.5.0"
CDI_KIND = "nvidia.com/gpu"

# User-space libraries of the compute and utility capabilities (what CUDA, NVML and nvidia-smi
# load), by the name before ".so".
LIBRARIES = (
    "libcuda",
    "libcudadebugger",
    "libnvidia-allocator",
    "libnvidia-cfg",
    "libnvidia-gpucomp",
    "libnvidia-ml",
    "libnvidia-nvvm",
    "libnvidia-opencl",
    "libnvidia-pkcs11",
    "libnvidia-pkcs11-openssl3",
    "libnvidia-ptxjitcompiler",
)
REQUIRED_LIBRARIES = ("libcuda", "libnvidia-ml")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu/nvidia/current",  # Debian's own driver packages
    "usr/lib/aarch64-linux-gnu",  # an arm64 host's (Grace: GH200, GB200)
    "usr/lib/aarch64-linux-gnu/nvidia/current",
    "usr/lib64",
    "usr/lib",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "lib64",
    "lib",
    # a root that was itself given the driver the way containers are (a VM image, a pod)
    "usr/local/nvidia/lib64",
)
BIN_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/nvidia/bin")
VERSION_FILES = ("proc/driver/nvidia/version", "sys/module/nvidia/version")
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")

_VERSION = r"\d+\.\d+(?:\.\d+)?"
# ELF e_machine → the arch as versions.yaml and Docker name it
MACHINES = {"EM_X86_64": "amd64", "EM_AARCH64": "arm64"}
_GPU_DEVICE = re.compile(r"^nvidia(\d+)$")


@dataclass(frozen=True)
class Mount:
    host: str  # absolute path on the host
    container: str
    kind: str  # lib, bin or firmware
    soname: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "container": self.container, "kind": self.kind}
        if self.soname:
            out["soname"] = self.soname
        out["options"] = list(MOUNT_OPTIONS)
        return out


@dataclass(frozen=True)
class Device:
    host: str
    container: str
    major: int
    minor: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "container": self.container,
            "major": self.major,
            "minor": self.minor,
        }


@dataclass(frozen=True)
class Driver:
    root: Path
    version: str
    mounts: tuple[Mount, ...]
    devices: tuple[Device, ...]  # control devices first, then GPUs in index order
    ignored: tuple[str, ...]  # other driver versions' files, by host path
    arch: str = "amd64"  # what its libcuda is built for: the only nodes that can load it

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if _GPU_DEVICE.match(Path(d.container).name))

    def plan(self) -> dict[str, Any]:
        return {
            "driver_root": str(self.root),
            "version": self.version,
            "arch": self.arch,
            "mounts": [m.as_dict() for m in self.mounts],
            "devices": [d.as_dict() for d in self.devices],
            "gpus": [d.container for d in self.gpus],
            "links": sonames(self.mounts),
            "ignored": list(self.ignored),
        }

    def cdi(self) -> dict[str, Any]:
        """A CDI spec: one device per GPU plus 'all'; shared device nodes and mounts in common."""

        def node(d: Device) -> dict[str, Any]:
            return {
                "path": d.container,
                "hostPath": d.host,
                "type": "c",
                "major": d.major,
                "minor": d.minor,
            }

        gpus = [
            {"name": Path(d.container).name.removeprefix("nvidia"), "containerEdits": {
                "deviceNodes": [node(d)]}}
            for d in self.gpus
        ]  # fmt: skip
        gpus.append(
            {"name": "all", "containerEdits": {"deviceNodes": [node(d) for d in self.gpus]}}
        )
        shared = [d for d in self.devices if d not in self.gpus]
        return {
            "cdiVersion": CDI_VERSION,
            "kind": CDI_KIND,
            "devices": gpus,
            "containerEdits": {
                "env": [f"NVIDIA_DRIVER_VERSION={self.version}"],
                "deviceNodes": [node(d) for d in shared],
                "mounts": [
                    {
                        "hostPath": m.host,
                        "containerPath": m.container,
                        "options": list(MOUNT_OPTIONS),
                        "type": "bind",
                    }
                    for m in self.mounts
                ],
            },
        }


def running_version(root: Path) -> str | None:
    """The loaded kernel module's version, or None when no NVIDIA driver is loaded."""
    for rel in VERSION_FILES:
        try:
            text = (root / rel).read_text()
        except OSError:
            continue
        # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 …" (or the
        # open module's wording), or just "535.104.05" in /sys/module/nvidia/version
        m = re.search(rf"(?:^|\s)({_VERSION})(?:\s|$)", text.splitlines()[0] if text else "")
        if m:
            return m.group(1)
    return None


def soname(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            for section in ELFFile(fh).iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags("DT_SONAME"):
                        return str(tag.soname)
    except (OSError, ELFError):
        return None
    return None


def machine(path: Path) -> str | None:
    """The arch an ELF file is built for (amd64, arm64), None for another or no ELF file."""
    try:
        with path.open("rb") as fh:
            return MACHINES.get(ELFFile(fh).header["e_machine"])
    except (OSError, ELFError):
        return None


def _libraries(root: Path, version: str) -> tuple[list[Mount], list[str]]:
    wanted = re.compile(rf"^({'|'.join(map(re.escape, LIBRARIES))})\.so\.({_VERSION})$")
    mounts: dict[str, Mount] = {}
    ignored: list[str] = []
    for rel in LIB_DIRS:
        directory = root / rel
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            m = wanted.match(path.name)
            if not m or not path.is_file():
                continue
            if m.group(2) != version:
                ignored.append(str(path))
            elif path.name not in mounts:  # the first directory wins, as for the loader
                real = path.resolve()
                mounts[path.name] = Mount(
                    str(real), f"{CONTAINER_LIB}/{path.name}", "lib", soname(real)
                )
    return sorted(mounts.values(), key=lambda m: m.container), ignored


def _binaries(root: Path) -> list[Mount]:
    out = []
    for name in BINARIES:
        for rel in BIN_DIRS:
            path = root / rel / name
            if path.is_file() and os.access(path, os.X_OK):
                out.append(Mount(str(path.resolve()), f"{CONTAINER_BIN}/{name}", "bin"))
                break
    return out


def _firmware(root: Path, version: str) -> list[Mount]:
    directory = root / "lib/firmware/nvidia" / version
    if not directory.is_dir():
        return []
    return [
        Mount(str(p.resolve()), f"/lib/firmware/nvidia/{version}/{p.name}", "firmware")
        for p in sorted(directory.glob("gsp*.bin"))
        if p.is_file()
    ]


def _char_device(path: Path, container: str) -> Device | None:
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return Device(str(path), container, os.major(st.st_rdev), os.minor(st.st_rdev))


def _devices(root: Path) -> list[Device]:
    dev = root / "dev"
    found = [_char_device(dev / name, f"/dev/{name}") for name in CONTROL_DEVICES]
    caps = dev / "nvidia-caps"
    if caps.is_dir():
        found += [_char_device(p, f"/dev/nvidia-caps/{p.name}") for p in sorted(caps.iterdir())]
    gpus = sorted(
        (int(m.group(1)), p)
        for p in (dev.iterdir() if dev.is_dir() else ())
        if (m := _GPU_DEVICE.match(p.name))
    )
    found += [_char_device(p, f"/dev/{p.name}") for _, p in gpus]
    return [d for d in found if d is not None]


def discover(root: Path = Path("/")) -> Driver | None:
    """The running driver under ``root``, or None (CPU mode) when no driver is loaded there.

    Raises ConfigError when a driver is loaded but unusable: its core libraries or its device
    nodes are missing.
    """
    root = root.resolve()
    version = running_version(root)
    if version is None:
        return None
    libraries, ignored = _libraries(root, version)
    have = {Path(m.container).name.split(".so.")[0] for m in libraries}
    missing = [name for name in REQUIRED_LIBRARIES if name not in have]
    if missing:
        raise ConfigError(
            f"{root}: NVIDIA driver {version} is loaded but {missing[0]}.so.{version} was not "
            f"found in any of {', '.join('/' + d for d in LIB_DIRS)}",
            hint="install the driver's user-space libraries of the same version as the module",
        )
    devices = _devices(root)
    names = {Path(d.container).name for d in devices}
    if "nvidiactl" not in names or not any(_GPU_DEVICE.match(n) for n in names):
        absent = "/dev/nvidiactl" if "nvidiactl" not in names else "/dev/nvidia[0-9]*"
        raise ConfigError(
            f"{root}: NVIDIA driver {version} is loaded but {absent} is missing "
            "(no GPU device nodes)",
            hint="create them with nvidia-modprobe (or nvidia-smi, run once as root)",
        )
    cuda = next(Path(m.host) for m in libraries if Path(m.container).name.startswith("libcuda."))
    arch = machine(cuda)
    if arch is None:
        raise ConfigError(
            f"{cuda}: expected a shared library for {' or '.join(MACHINES.values())}",
            hint="install the driver's user-space libraries for this host's arch",
        )
    mounts = libraries + _binaries(root) + _firmware(root, version)
    return Driver(root, version, tuple(mounts), tuple(devices), tuple(ignored), arch)


def sonames(mounts: Iterable[Mount]) -> dict[str, str]:
    """SONAME → file name: the links a loader needs next to the versioned files."""
    return {
        m.soname: Path(m.container).name
        for m in mounts
        if m.soname and m.soname != Path(m.container).name
    }
