"""GPU user-space sources without Docker: wheels fetched by the real pip from a PyPI-style index
served on 127.0.0.1, the two source kinds in versions.yaml, and the tools built from git (pyxis,
enroot, nccl-tests) rendered into every image that carries them."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import io
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmforge import config, features, matrix, versions
from slurmforge.app import Project, Selection
from slurmforge.context import ContextSources
from slurmforge.errors import ChecksumError, ConfigError, SourceError
from slurmforge.render import DockerfileRenderer, Rendered
from slurmforge.sources import Cache
from slurmforge.userspace import Wheel, WheelPin
from tests.common import ROOT
from tests.unit.helpers import HADOLINT

NAME, VERSION = "nvidia-fake-cu12", "1.2.3"
FILENAME = f"nvidia_fake_cu12-{VERSION}-py3-none-manylinux1_x86_64.whl"
FILENAME_ARM = f"nvidia_fake_cu12-{VERSION}-py3-none-manylinux2014_aarch64.whl"


def _wheel(machine: str = "x86_64") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("nvidia/fake/lib/libfake.so.1", f"\x7fELF not really, {machine}")
        z.writestr(f"nvidia_fake_cu12-{VERSION}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n")  # fmt: skip
        z.writestr(f"nvidia_fake_cu12-{VERSION}.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        z.writestr(f"nvidia_fake_cu12-{VERSION}.dist-info/RECORD", "")
    return buf.getvalue()


WHEEL, WHEEL_ARM = _wheel(), _wheel("aarch64")
APT = {
    "repository": "https://example.org/compute/cuda/repos/debian12/x86_64/",
    "keyring": {"url": "https://example.org/3bf863cc.pub", "sha256": "e" * 64},
    "packages": ["cuda-cudart-12-2=12.2.140-1"],
}
SHA, SHA_ARM = hashlib.sha256(WHEEL).hexdigest(), hashlib.sha256(WHEEL_ARM).hexdigest()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A PEP 503 'simple' index holding one wheel for each arch, as NVIDIA publishes them; pip is
    pointed at it and at nothing else."""
    root = tmp_path / "index"
    (root / "simple" / NAME).mkdir(parents=True)
    (root / "files").mkdir()
    (root / "files" / FILENAME).write_bytes(WHEEL)
    (root / "files" / FILENAME_ARM).write_bytes(WHEEL_ARM)
    (root / "simple" / NAME / "index.html").write_text(
        f'<a href="../../files/{FILENAME}#sha256={SHA}">{FILENAME}</a>\n'
        f'<a href="../../files/{FILENAME_ARM}#sha256={SHA_ARM}">{FILENAME_ARM}</a>\n'
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/simple/"
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", url)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    yield url
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cfg(shipped: dict, write_config) -> config.Config:
    return versions.load(write_config(shipped))


def test_wheel_is_fetched_by_pip_and_verified(index: str, tmp_path: Path, cfg) -> None:
    cache = Cache(tmp_path / "cache")
    got = cache.fetch(cfg, [Wheel(requirement=f"{NAME}=={VERSION}", sha256=SHA)])
    assert got.sha256 == SHA
    assert got.path == tmp_path / "cache" / SHA / f"nvidia_fake_cu12-{VERSION}.whl"
    assert got.path.read_bytes() == WHEEL
    assert cache.lookup(SHA, got.path.name) == got.path


def test_each_arch_gets_its_own_wheel_and_checksum(index: str, tmp_path: Path, cfg) -> None:
    """A wheel pinned for both arches is two files: pip picks each by its platform tag, and the
    arm64 one is checked against arm64's pin (the amd64 checksum does not pass for it)."""
    cache = Cache(tmp_path / "cache")
    pin = WheelPin(requirement=f"{NAME}=={VERSION}", sha256={"amd64": SHA, "arm64": SHA_ARM})
    amd, arm = pin.for_arch("amd64"), pin.for_arch("arm64")
    assert amd is not None and arm is not None and amd.key != arm.key
    got = cache.fetch(cfg, [arm])
    assert got.path == tmp_path / "cache" / SHA_ARM / f"nvidia_fake_cu12-{VERSION}-arm64.whl"
    assert got.path.read_bytes() == WHEEL_ARM
    assert cache.fetch(cfg, [amd]).path.read_bytes() == WHEEL
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        cache.fetch(cfg, [Wheel(f"{NAME}=={VERSION}", SHA, "arm64")])


def test_wheel_with_the_wrong_hash_is_refused(index: str, tmp_path: Path, cfg) -> None:
    cache = Cache(tmp_path / "cache")
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        cache.fetch(cfg, [Wheel(requirement=f"{NAME}=={VERSION}", sha256="0" * 64)])
    assert not list((tmp_path / "cache").glob("*/*.whl"))


def test_missing_wheel_is_a_source_error(index: str, tmp_path: Path, cfg) -> None:
    with pytest.raises(SourceError, match="pip download failed"):
        Cache(tmp_path / "cache").fetch(cfg, [Wheel(requirement=f"{NAME}==9.9.9", sha256=SHA)])


def _install(prefix: Path, *files: Path) -> None:
    """images/gpu/install-userspace, run here with the host's sh, unzip and dpkg-deb."""
    script = ROOT / "images/gpu/install-userspace"
    subprocess.run(["sh", str(script), str(prefix), *map(str, files)], check=True)


def test_unpacked_wheel_layout(tmp_path: Path) -> None:
    whl = tmp_path / "w.whl"
    whl.write_bytes(WHEEL)
    prefix = tmp_path / "cuda"
    _install(prefix, whl)
    assert (prefix / "lib64/libfake.so.1").read_bytes() == b"\x7fELF not really, x86_64"
    assert (prefix / "lib64/libfake.so").readlink() == Path("libfake.so.1")
    assert (prefix / "slurmforge-versions.txt").read_text() == f"{NAME} {VERSION}\n"
    assert not (prefix / "bin/nvcc.profile").exists()  # no compiler, no profile


def _toolkit_deb(tmp_path: Path) -> Path:
    """A package laid out as Debian's nvidia-cuda-toolkit is (nvcc behind a wrapper in /usr/bin,
    the real one with cicc and crt under /usr/lib/nvidia-cuda-toolkit), built with dpkg-deb."""
    root = tmp_path / "pkg"
    files = {
        "usr/bin/nvcc": '#!/bin/sh\nexec /usr/lib/nvidia-cuda-toolkit/bin/nvcc "$@"\n',
        "usr/bin/fatbinary": "fatbinary",
        "usr/lib/nvidia-cuda-toolkit/bin/nvcc": "real nvcc",
        "usr/lib/nvidia-cuda-toolkit/bin/cicc": "cicc",
        "usr/lib/nvidia-cuda-toolkit/bin/crt/link.stub": "stub",
        "usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc": "bc",
        "usr/include/nvvm.h": "/* nvvm */",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "usr/bin/compute-sanitizer").symlink_to("../lib/nvidia-cuda-toolkit/absent")
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN/control").write_text(
        "Package: nvidia-cuda-toolkit\nVersion: 12.4.131~12.4.1-2\nArchitecture: amd64\n"
        "Maintainer: test <t@example.org>\nDescription: stand-in\n"
    )
    deb = tmp_path / "nvidia-cuda-toolkit_12.4.131_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)],
                   check=True, capture_output=True)  # fmt: skip
    return deb


def test_unpacked_debian_toolkit_takes_nvidias_layout(tmp_path: Path) -> None:
    whl = tmp_path / "w.whl"
    whl.write_bytes(WHEEL)
    prefix = tmp_path / "cuda-build"
    _install(prefix, whl, _toolkit_deb(tmp_path))
    assert (prefix / "bin/nvcc").read_text() == "real nvcc"  # not Debian's wrapper
    assert (prefix / "bin/fatbinary").is_file()
    assert (prefix / "nvvm/bin/cicc").read_text() == "cicc"
    assert (prefix / "bin/crt/link.stub").is_file()
    assert (prefix / "nvvm/libdevice/libdevice.10.bc").is_file()
    assert (prefix / "include/nvvm.h").is_file()
    assert not (prefix / "bin/compute-sanitizer").exists()  # a link out of the package
    profile = (prefix / "bin/nvcc.profile").read_text()
    assert "TOP                = $(_HERE_)/.." in profile and "/usr" not in profile
    assert (prefix / "slurmforge-versions.txt").read_text().splitlines() == [
        f"{NAME} {VERSION}",
        "nvidia-cuda-toolkit 12.4.131~12.4.1-2",
    ]
    assert not list(tmp_path.glob("usr"))  # unpacked into the prefix only


def test_unknown_file_kind_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "x.tar"
    other.write_bytes(b"")
    proc = subprocess.run(["sh", str(ROOT / "images/gpu/install-userspace"),
                           str(tmp_path / "p"), str(other)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2 and "expected a .whl or .deb file" in proc.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["cuda"]["12.2.2"]["runtime"].update(apt=APT),
         'cuda."12.2.2".runtime: expected \'wheels\' and/or \'debs\', or \'apt\' or \'lock\' '
         "on its own"),
        (lambda d: d["cuda"]["12.2.2"]["build"]["debs"][0].update(url="https://example.org/x.tar"),
         'cuda."12.2.2".build.debs[0]: expected the URL of a .deb file'),
        (lambda d: d["cuda"]["12.2.2"]["runtime"]["wheels"][0].update(requirement="nvidia-x>=1"),
         'cuda."12.2.2".runtime.wheels[0].requirement: expected a value matching'),
        (lambda d: d["tools"].pop("nccl"), "tools.nccl: required key is missing"),
        (lambda d: d["tools"]["enroot"].pop("releases"),
         "tools.enroot: expected 'version' (or 'releases')"),
        (lambda d: d["tools"].update(enroot={"version": "3.5.0"}),
         "tools.enroot: expected 'sources' (a URL with sha256, or git with commit) or 'releases'"),
        # the feature table says how each tool is had: nccl is unpacked, never compiled here
        (lambda d: d["tools"]["nccl"].update(sources=d["slurm"]["24.05.8"]["sources"]),
         "tools.nccl.sources: unknown key"),
        # each tool's release is picked on the axis it is built against
        (lambda d: d["cuda"]["12.9.1"]["tools"].pop("nccl-tests"),
         'cuda."12.9.1".tools.nccl-tests: required key is missing (tools.nccl-tests has several '
         "releases; pick one of 2.13.8, 2.19.6 for CUDA 12.9.1)"),
        (lambda d: d["slurm"]["24.05.8"]["tools"].update(nccl="2.27.7"),
         'slurm."24.05.8".tools.nccl: unknown tool under slurm (it is built against CUDA: pick '
         "its release under cuda.<version>.tools)"),
        (lambda d: d["cuda"]["12.2.2"]["tools"].update(enroot="4.1.2"),
         'cuda."12.2.2".tools.enroot: unknown tool under cuda (it is built against Slurm'),
        (lambda d: d["cuda"]["12.2.2"]["tools"].update(nccl="2.19.3"),
         'cuda."12.2.2".tools.nccl: unknown release \'2.19.3\'; expected one of 2.18.3, 2.27.7'),
        (lambda d: d["tools"]["nccl"]["releases"]["2.27.7"].pop("userspace"),
         'tools.nccl.releases."2.27.7".userspace: required key is missing'),
        (lambda d: d["tools"].update(horovod=d["tools"]["enroot"]),
         "tools.horovod: unknown key"),
        (lambda d: d["cuda"]["12.2.2"].pop("build"),
         'cuda."12.2.2".build: required key is missing'),
        (lambda d: d["cuda"]["12.2.2"].update(arches=["80"]),
         'cuda."12.2.2".arches[0]: expected a value matching'),
    ],
)  # fmt: skip
def test_bad_gpu_config_names_the_key(shipped: dict, write_config, change, message) -> None:
    change(shipped)
    with pytest.raises(ConfigError) as exc:
        versions.load(write_config(shipped))
    assert message in exc.value.message


def _targets(cfg: config.Config) -> dict[str, matrix.BuildTarget]:
    cells = matrix.cells_of(cfg, "default")
    return {t.component: t for t in matrix.expand(cfg, "default", cells)}


def _render(cfg: config.Config, cache: Cache, component: str) -> str:
    targets = _targets(cfg)
    target = targets[component]
    parents = {p.split("/")[0]: "parent:" + p for p in target.parents}
    upstream = ContextSources(cfg, cache)(target)
    return DockerfileRenderer(cfg, ROOT / "images").render(target, parents, upstream).dockerfile


def _cache_all(cfg: config.Config, cache: Cache) -> None:
    """Put stand-ins for every source in the cache under its key (the rendered Dockerfile only
    needs them to exist; no build happens here)."""
    v = cfg.versions
    pins = [*v.cuda["12.2.2"].runtime.wheels, *v.release("nccl", None, "12.2.2")[1].wheels]
    wanted = [pin.for_arch("amd64") for pin in (*pins, *v.cuda["12.2.2"].build.wheels)]
    wanted += v.cuda["12.2.2"].build.debs
    tools = ("pyxis", "enroot", "nccl-tests")
    wanted += [v.release(name, "24.05.8", "12.2.2")[1][0] for name in tools]
    for artifact in wanted:
        path = cache.root / cfg.sha256_of(artifact) / artifact.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"stand-in")


def test_every_image_carries_the_tools_built_from_their_pinned_commits(cfg, tmp_path) -> None:
    cache = Cache(tmp_path / "cache")
    _cache_all(cfg, cache)
    worker = _render(cfg, cache, "worker")
    assert "io.slurmforge.skipped" not in worker
    assert 'io.slurmforge.features="cuda,enroot,nccl,nccl-tests,pyxis"' in worker
    # compiled in a builder of its own, beside the Slurm compile the worker waits for
    assert " AS nccl-tests\n" not in worker and "sources/nccl-tests" not in worker
    assert "COPY --from=parent:nccl-tests/debian12-12.2.2 /opt/nccl-tests/bin/ " in worker
    tests = _render(cfg, cache, "nccl-tests")
    # nccl-tests: SASS for the configured generations only, plus PTX of the newest
    assert (
        'NVCC_GENCODE="-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 '
        '-gencode=arch=compute_90,code=compute_90"' in tests
    )
    assert "COPY sources/nccl-tests/nccl-tests-v2.13.8.tar" in tests
    # compiled in a prefix of its own, from wheels and Debian's toolkit, against the shared runtime
    assert "sources/cuda-build/nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb" in tests
    assert "install-userspace /opt/cuda-build /tmp/userspace/cuda-build/*" in tests
    assert 'NVCC="/opt/cuda-build/bin/nvcc -cudart shared -cudadevrt none"' in tests
    assert "crossbuild-essential" not in tests and "/opt/cuda-target" not in tests
    slurmd = _render(cfg, cache, "slurmd")  # CPU nodes run containers too
    for text in (slurmd, _render(cfg, cache, "jail")):
        # installed from the builder's packages, like Slurm's own: no compile in a role image
        assert "AS enroot" not in text and "sources/enroot" not in text
        assert "/debs/enroot_*.deb /debs/enroot+caps_*.deb" in text
        assert "slurmforge-pyxis_*.deb" in text and "/etc/enroot/enroot.conf" in text
    debs = _render(cfg, cache, "slurm-debs")
    # enroot: built once per distro in the builder, before the Slurm compile
    assert debs.index(" AS enroot\n") < debs.index("debuild")
    assert "COPY sources/enroot/enroot-v3.5.0.tar /build/enroot.tar" in debs
    assert "make -C /build/enroot deb" in debs and "enroot+caps_*.deb" in debs
    assert "COPY --from=enroot /debs/ /debs/" in debs
    assert "COPY sources/pyxis/pyxis-v0.24.0.tar /build/pyxis.tar" in debs
    assert "PYXIS_VERSION=0.24.0 SLURM_VERSION=24.05.8" in debs
    assert "COPY slurm-slurm-24-05-8-1.tar /build/" in debs


def test_apt_kind_renders_one_recipe_and_passes_hadolint(shipped, write_config, tmp_path) -> None:
    shipped["cuda"]["12.2.2"]["runtime"] = {"apt": APT}
    cfg = versions.load(write_config(shipped))
    cache = Cache(tmp_path / "cache")
    key = cache.root / ("e" * 64) / "3bf863cc.pub"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"key")
    _cache_all(
        cfg.model_copy(update={"versions": versions.load(ROOT / "versions.yaml").versions}), cache
    )
    out = tmp_path / "Dockerfile"
    for component in ("worker", "jail"):
        text = _render(cfg, cache, component)
        assert "signed-by=/usr/share/keyrings/slurmforge-cuda.asc" in text
        assert "apt-get install -y --no-install-recommends cuda-cudart-12-2=12.2.140-1" in text
        out.write_text(text)
        lint = subprocess.run(
            [HADOLINT, "--config", str(ROOT / ".hadolint.yaml"), str(out)],
            capture_output=True,
            text=True,
        )
        assert lint.returncode == 0, lint.stdout


def test_an_optional_feature_that_cannot_be_had_is_left_out_and_said(
    cfg, tmp_path, monkeypatch
) -> None:
    """A row of the feature table marked optional: when its sources are not in the cache, every
    image that builds or carries it goes without, labels that, and still passes hadolint; a
    child image (slurmd) lacks what its builder (slurm-debs) skipped."""
    for name in ("nccl-tests", "pyxis"):
        row = dataclasses.replace(features.FEATURES[name], optional=True)
        monkeypatch.setitem(features.FEATURES, name, row)
    for tree in ("images", "jail", "rootfs"):  # the project's own files beside the config
        (tmp_path / tree).symlink_to(ROOT / tree)
    project = Project(Selection(cfg.path, "default"))
    _cache_all(cfg, project.cache)
    for name in ("nccl-tests", "pyxis"):
        (source,) = cfg.versions.release(name, "24.05.8", "12.2.2")[1]
        (project.cache.root / cfg.sha256_of(source) / source.filename).unlink()
    targets = {t.component: t for t in project.targets}
    sources = project.context
    built = ("slurm-debs", "slurmd", "nccl-tests", "worker", "jail")
    rendered = {c: project.rendered(targets[c]) for c in built}
    assert sources(targets["nccl-tests"]).skipped == ("nccl-tests",)
    assert "make" not in rendered["nccl-tests"].dockerfile
    assert sources(targets["slurm-debs"]).skipped == ("pyxis",)
    assert all(isinstance(r, Rendered) for r in rendered.values())
    debs = rendered["slurm-debs"].dockerfile
    assert "pyxis" not in debs and "COPY --from=enroot" in debs
    slurmd = rendered["slurmd"]
    assert slurmd.lacking == ("pyxis",) and "slurmforge-pyxis" not in slurmd.dockerfile
    assert 'io.slurmforge.features="enroot" \\\n      io.slurmforge.skipped="pyxis"' in (
        slurmd.dockerfile
    )
    out = tmp_path / "Dockerfile"
    for component in ("worker", "jail"):
        image = rendered[component]
        assert image.lacking == ("nccl-tests", "pyxis")
        assert " AS nccl-tests" not in image.dockerfile
        assert "/opt/nccl-tests" not in image.dockerfile
        assert "sources/cuda-build" not in image.dockerfile  # needed by nccl-tests alone
        carried = "cuda,enroot,jupyterlab,nccl" if component == "jail" else "cuda,enroot,nccl"
        assert f'io.slurmforge.features="{carried}"' in image.dockerfile
        assert 'io.slurmforge.skipped="nccl-tests,pyxis"' in image.dockerfile
        assert not any("cuda-build" in f.arcname for f in image.files)
        out.write_text(image.dockerfile)
        lint = subprocess.run(
            [HADOLINT, "--config", str(ROOT / ".hadolint.yaml"), str(out)],
            capture_output=True,
            text=True,
        )
        assert lint.returncode == 0, lint.stdout
