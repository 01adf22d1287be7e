"""Driver discovery on a synthetic driver root (tests/driver_root.py says what is real in it).

This machine has no GPU: the root stands in for one, with gcc-compiled ELF libraries named as the
535.104.05 driver names them, a leftover 530.30.02 driver, and real character device nodes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest
import referencing

from slurmforge import gpu_driver
from slurmforge.errors import ConfigError
from tests import driver_root
from tests.common import ROOT
from tests.unit.helpers import assert_clean_failure, run_invoke

SCHEMA_DIR = ROOT / ".cache" / "cdi-schema"  # from Debian's CDI package (scripts/setup)
V, OLD = driver_root.VERSION, driver_root.OLD_VERSION


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return driver_root.make(tmp_path_factory.mktemp("host"))


def test_mount_plan_is_exactly_the_running_drivers_files(host: Path) -> None:
    driver = gpu_driver.discover(host)
    assert driver is not None
    lib = host / driver_root.LIB_DIR
    fw = host / "lib/firmware/nvidia" / V
    ro = ["ro", "nosuid", "nodev", "bind"]

    def libm(name: str, soname: str) -> dict:
        return {
            "host": f"{lib}/{name}.so.{V}",
            "container": f"/usr/local/nvidia/lib64/{name}.so.{V}",
            "kind": "lib",
            "soname": soname,
            "options": ro,
        }

    def dev(rel: str) -> dict:
        major, minor = driver_root.DEVICES[rel]
        return {"host": f"{host}/dev/{rel}", "container": f"/dev/{rel}", "major": major,
                "minor": minor}  # fmt: skip

    assert driver.plan() == {
        "driver_root": str(host),
        "version": V,
        "arch": "amd64",
        "mounts": [
            libm("libcuda", "libcuda.so.1"),
            libm("libcudadebugger", "libcudadebugger.so.1"),
            libm("libnvidia-ml", "libnvidia-ml.so.1"),
            libm("libnvidia-nvvm", "libnvidia-nvvm.so.4"),
            libm("libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1"),
            {
                "host": f"{host}/usr/bin/nvidia-smi",
                "container": "/usr/local/nvidia/bin/nvidia-smi",
                "kind": "bin",
                "options": ro,
            },
            {
                "host": f"{fw}/gsp_ga10x.bin",
                "container": f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin",
                "kind": "firmware",
                "options": ro,
            },
            {
                "host": f"{fw}/gsp_tu10x.bin",
                "container": f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin",
                "kind": "firmware",
                "options": ro,
            },
        ],
        "devices": [
            dev("nvidiactl"),
            dev("nvidia-uvm"),
            dev("nvidia-caps/nvidia-cap1"),
            dev("nvidia0"),
            dev("nvidia1"),
        ],
        "gpus": ["/dev/nvidia0", "/dev/nvidia1"],
        "links": {
            "libcuda.so.1": f"libcuda.so.{V}",
            "libcudadebugger.so.1": f"libcudadebugger.so.{V}",
            "libnvidia-ml.so.1": f"libnvidia-ml.so.{V}",
            "libnvidia-nvvm.so.4": f"libnvidia-nvvm.so.{V}",
            "libnvidia-ptxjitcompiler.so.1": f"libnvidia-ptxjitcompiler.so.{V}",
        },
        "ignored": [f"{lib}/libcuda.so.{OLD}", f"{lib}/libnvidia-ml.so.{OLD}"],
    }


def test_cdi_spec_validates_against_the_cdi_schema(host: Path) -> None:
    driver = gpu_driver.discover(host)
    assert driver is not None
    spec = driver.cdi()
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = referencing.Registry().with_resource(
        "defs.json", referencing.Resource.from_contents(defs, referencing.jsonschema.DRAFT7)
    )
    jsonschema.Draft7Validator(schema, registry=registry).validate(spec)
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]
    mounts = spec["containerEdits"]["mounts"]
    assert mounts and all("ro" in m["options"] for m in mounts)
    # the schema itself is strict enough to catch a broken spec
    broken = json.loads(json.dumps(spec))
    del broken["devices"][0]["containerEdits"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema, registry=registry).validate(broken)


def test_version_from_sys_module_and_open_module_wording(tmp_path: Path) -> None:
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    (tmp_path / "sys/module/nvidia/version").write_text(f"{V}\n")
    assert gpu_driver.running_version(tmp_path) == V
    proc = tmp_path / "proc/driver/nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n"
    )
    assert gpu_driver.running_version(tmp_path) == "550.54.15"


def test_soname_is_read_from_the_elf_file(host: Path) -> None:
    lib = host / driver_root.LIB_DIR
    assert gpu_driver.soname(lib / f"libnvidia-nvvm.so.{V}") == "libnvidia-nvvm.so.4"
    assert gpu_driver.soname(host / "proc/driver/nvidia/version") is None  # not ELF


def test_no_driver_is_cpu_mode(tmp_path: Path) -> None:
    assert gpu_driver.discover(tmp_path) is None
    proc = run_invoke("gpu-detect", "--driver-root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "CPU mode" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["mounts"] == []


def test_a_driver_root_that_is_not_a_directory_is_refused_not_read_as_cpu_mode(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("")
    for root in (tmp_path / "typo", tmp_path / "file"):
        for fmt in ("json", "cdi"):  # cdi printed nothing, exit 0
            proc = run_invoke("gpu-detect", "--driver-root", str(root), "--format", fmt)
            assert_clean_failure(proc, f"--driver-root '{root}': expected a directory")


def test_cli_prints_plan_and_cdi_and_warns_about_other_versions(host: Path) -> None:
    proc = run_invoke("gpu-detect", "--driver-root", str(host))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["version"] == V
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(warnings) == 2 and all(OLD in w and V in w for w in warnings)
    cdi = run_invoke("gpu-detect", "--driver-root", str(host), "--format", "cdi")
    assert json.loads(cdi.stdout)["cdiVersion"] == gpu_driver.CDI_VERSION


def test_missing_device_nodes_are_refused(tmp_path: Path) -> None:
    root = driver_root.make(tmp_path / "host", devices=False)
    with pytest.raises(ConfigError, match="/dev/nvidiactl is missing"):
        gpu_driver.discover(root)
    assert_clean_failure(
        run_invoke("gpu-detect", "--driver-root", str(root)), "/dev/nvidiactl is missing"
    )


def test_missing_gpu_device_is_refused(tmp_path: Path) -> None:
    root = driver_root.make(tmp_path / "host")
    for rel in ("nvidia0", "nvidia1"):
        os.unlink(root / "dev" / rel)
    with pytest.raises(ConfigError, match=r"/dev/nvidia\[0-9\]\* is missing"):
        gpu_driver.discover(root)


def test_only_other_versions_libraries_is_refused(tmp_path: Path) -> None:
    """The module says 535 but only 530's libcuda is installed: that must not be mounted."""
    root = driver_root.make(tmp_path / "host")
    lib = root / driver_root.LIB_DIR
    os.unlink(lib / f"libcuda.so.{V}")
    with pytest.raises(ConfigError, match=f"libcuda.so.{V} was not found"):
        gpu_driver.discover(root)


@pytest.mark.parametrize(
    "where",
    [
        "usr/lib/x86_64-linux-gnu/nvidia/current",  # Debian's own driver packages
        "usr/local/nvidia/lib64",  # a root given the driver as containers are (seen on a GPU VM)
    ],
)
def test_a_directory_of_another_driver_layout_is_found(tmp_path: Path, where: str) -> None:
    root = driver_root.make(tmp_path / "host", leftovers=False)
    lib = root / driver_root.LIB_DIR
    current = root / where
    current.mkdir(parents=True)
    for path in list(lib.glob(f"*.so.{V}")):
        shutil.move(path, current / path.name)
    driver = gpu_driver.discover(root)
    assert driver is not None
    assert {Path(m.host).parent for m in driver.mounts if m.kind == "lib"} == {current}


def test_an_arm64_hosts_driver_is_found_where_it_installs_and_said_to_be_arm64(
    tmp_path: Path,
) -> None:
    """A Grace host (GH200, GB200): the driver's libraries are aarch64 ELF files under
    usr/lib/aarch64-linux-gnu and the module says aarch64; the plan mounts them, with their
    SONAMEs read from the files, and says which arch of node can load them."""
    root = driver_root.make(tmp_path / "grace", arch="arm64")
    driver = gpu_driver.discover(root)
    assert driver is not None and driver.arch == "arm64"
    libs = [m for m in driver.mounts if m.kind == "lib"]
    assert {Path(m.host).parent for m in libs} == {root / "usr/lib/aarch64-linux-gnu"}
    assert {m.soname for m in libs} == set(driver_root.LIBRARIES.values())
    assert all(gpu_driver.machine(Path(m.host)) == "arm64" for m in libs)
    assert [m.container for m in driver.mounts if m.kind == "firmware"] == [
        f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin",
    ]
    assert driver.plan()["arch"] == "arm64"
    lib = root / "usr/lib/aarch64-linux-gnu"
    assert driver.plan()["ignored"] == [f"{lib}/libcuda.so.{OLD}", f"{lib}/libnvidia-ml.so.{OLD}"]


def test_a_libcuda_that_is_no_elf_library_is_refused(tmp_path: Path) -> None:
    root = driver_root.make(tmp_path / "host", leftovers=False)
    (root / driver_root.LIB_DIR / f"libcuda.so.{V}").write_bytes(b"not a library")
    with pytest.raises(ConfigError, match=f"libcuda.so.{V}: expected a shared library for amd64"):
        gpu_driver.discover(root)
