"""A synthetic NVIDIA driver root: the stand-in for a GPU host on machines that have none.

What is real: the libraries are ELF shared objects compiled here with gcc, named and SONAME'd as
the driver names them (libcuda.so.<version>, SONAME libcuda.so.1), and libcuda exports
cuDriverGetVersion like the real one, so a loader and ctypes can resolve and call it. The binary
nvidia-smi is a compiled program. Device nodes are real character devices with the driver's
major numbers (nothing behind them). What is faked: there is no GPU and no kernel module; the
module's version comes from a written /proc/driver/nvidia/version.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

VERSION = "535.104.05"
OLD_VERSION = "530.30.02"  # leftovers of an earlier driver that discovery must ignore
CUDA_DRIVER_API = 12020  # what the stand-in libcuda reports, like a 535 driver (CUDA 12.2)
LIB_DIR = "usr/lib/x86_64-linux-gnu"
# arch → (where its driver installs, its GNU CPU name: the cross compiler's and the module's)
ARCHES = {"amd64": (LIB_DIR, "x86_64"), "arm64": ("usr/lib/aarch64-linux-gnu", "aarch64")}

# name → SONAME, as the 535 driver ships them
LIBRARIES = {
    "libcuda": "libcuda.so.1",
    "libcudadebugger": "libcudadebugger.so.1",
    "libnvidia-ml": "libnvidia-ml.so.1",
    "libnvidia-nvvm": "libnvidia-nvvm.so.4",
    "libnvidia-ptxjitcompiler": "libnvidia-ptxjitcompiler.so.1",
}
DEVICES = {  # path under /dev → (major, minor)
    "nvidiactl": (195, 255),
    "nvidia0": (195, 0),
    "nvidia1": (195, 1),
    "nvidia-uvm": (511, 0),
    "nvidia-caps/nvidia-cap1": (236, 1),
}

_LIB_C = """
const char *slurmforge_standin_driver(void) { return "%(version)s"; }
int cuDriverGetVersion(int *v) { *v = %(api)d; return 0; }
"""
_SMI_C = """
#include <stdio.h>
int main(void) {
  printf("GPU 0: Stand-in GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)\\n");
  return 0;
}
"""


def _gcc(out: Path, source: str, *flags: str, arch: str = "amd64") -> None:
    """Compile with the host's gcc, or for another arch with Debian's cross gcc (scripts/setup
    installs aarch64's)."""
    cpu = ARCHES[arch][1]
    gcc = "gcc" if cpu == os.uname().machine else f"{cpu}-linux-gnu-gcc"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [gcc, "-x", "c", "-O1", "-o", str(out), *flags, "-"],
        input=source,
        text=True,
        check=True,
    )


def _library(directory: Path, name: str, version: str, arch: str) -> Path:
    path = directory / f"{name}.so.{version}"
    soname = LIBRARIES[name]
    _gcc(
        path,
        _LIB_C % {"version": version, "api": CUDA_DRIVER_API},
        "-shared",
        "-fPIC",
        f"-Wl,-soname,{soname}",
        arch=arch,
    )
    return path


def make(
    root: Path,
    *,
    devices: bool = True,
    leftovers: bool = True,
    gpus: int = 2,
    arch: str = "amd64",
) -> Path:
    """Build a driver root under ``root`` (libraries, nvidia-smi, firmware, /proc, /dev), laid
    out as on an ``arch`` host (arm64: a Grace host's, with aarch64 libraries)."""
    libdir = root / ARCHES[arch][0]
    for name, soname in LIBRARIES.items():
        lib = _library(libdir, name, VERSION, arch)
        (libdir / soname).symlink_to(lib.name)  # as the driver's installer leaves them
    if leftovers:
        _library(libdir, "libcuda", OLD_VERSION, arch)
        _library(libdir, "libnvidia-ml", OLD_VERSION, arch)
        old_fw = root / "lib/firmware/nvidia" / OLD_VERSION
        old_fw.mkdir(parents=True)
        (old_fw / "gsp_ga10x.bin").write_bytes(b"old firmware")
    _gcc(root / "usr/bin/nvidia-smi", _SMI_C, arch=arch)
    firmware = root / "lib/firmware/nvidia" / VERSION
    firmware.mkdir(parents=True)
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        (firmware / name).write_bytes(b"stand-in firmware " + name.encode())
    proc = root / "proc/driver/nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(
        f"NVRM version: NVIDIA UNIX {ARCHES[arch][1]} Kernel Module  {VERSION}  "
        "Sat Aug 19 01:15:15 UTC 2023\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    if devices:
        extra = {f"nvidia{i}": (195, i) for i in range(gpus)}
        for rel, (major, minor) in {**DEVICES, **extra}.items():
            path = root / "dev" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return root
