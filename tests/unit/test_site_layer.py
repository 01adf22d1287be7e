"""The site layer (site_layer.py): what site.yaml may say, the Dockerfile part it adds to a
component, the content-hash inputs a plan names, and hadolint's findings blamed on the site's
own file and line."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from slurmforge import site_layer
from slurmforge.errors import ConfigError

COMPONENTS = ["jail", "login", "slurmctld", "slurmd", "worker"]
FROM = "FROM debian:12\nRUN true\n"


def wheel(directory: Path) -> str:
    """A one-module wheel of demo-pkg 1.0 in ``directory`` (a local index: no network); its
    sha256."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "demo_pkg-1.0-py3-none-any.whl"
    info = "demo_pkg-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("demo_pkg/__init__.py", "")
        whl.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n")
        whl.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(f"{info}/RECORD", "")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def requirements(tmp_path: Path, sha256: str) -> str:
    index = tmp_path / "index"
    return f"--no-index\n--find-links {index}\ndemo-pkg==1.0 --hash=sha256:{sha256}\n"


def layer(tmp_path: Path, text: str) -> site_layer.SiteLayer:
    (tmp_path / "site.yaml").write_text(text)
    return site_layer.SiteLayer(tmp_path, COMPONENTS)


def test_a_block_installs_pins_copies_and_runs_the_fragment(tmp_path: Path) -> None:
    (tmp_path / "req.txt").write_text(requirements(tmp_path, wheel(tmp_path / "index")))
    (tmp_path / "files" / "etc").mkdir(parents=True)
    (tmp_path / "files" / "etc" / "site.conf").write_text("x\n")
    (tmp_path / "frag.Dockerfile").write_text("ENV SITE=ours\n")
    site = layer(
        tmp_path,
        "components:\n  jail:\n    debs: [tree, htop=3.2.2-2]\n    pip: req.txt\n"
        "    files: files\n    fragment: frag.Dockerfile\n",
    )
    block = site.block("jail")
    assert block is not None and site.block("worker") is None
    assert block.text.splitlines() == [
        f"{site_layer.HOOK}: {tmp_path.name}/site.yaml components.jail",
        "COPY site/jail/pip/ /tmp/slurmforge-site-pip/",
        "RUN apt-get update \\",
        " && apt-get install -y --no-install-recommends htop=3.2.2-2 tree python3-pip \\",
        " && rm -rf /var/lib/apt/lists/* \\",
        " && python3 -m pip install --no-cache-dir --break-system-packages --no-index "
        "--find-links /tmp/slurmforge-site-pip -r /tmp/slurmforge-site-pip/requirements.txt \\",
        " && rm -rf /tmp/slurmforge-site-pip",
        "COPY site/jail/files/ /",
        "ENV SITE=ours",
    ]
    assert sorted(block.files) == [
        "site/jail/files/etc/site.conf",
        "site/jail/pip/demo_pkg-1.0-py3-none-any.whl",  # fetched here, installed without index
        "site/jail/pip/requirements.txt",
    ]
    assert sorted(block.inputs) == [
        "debs",
        "files:files/etc/site.conf",
        "fragment:frag.Dockerfile",
        "pip:req.txt",
        "wheel:demo_pkg-1.0-py3-none-any.whl",
    ]
    site_layer.lint(FROM + block.text, block, site, "jail")  # passes the project's rules


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("components:\n  jial: {debs: [tree]}\n", r"components\.jial: unknown component"),
        (
            "components:\n  jail: {debs: [Tree]}\n",
            r"components\.jail\.debs\[0\]: expected a Debian package",
        ),
        ("components:\n  jail: {debs: ['tree; rm -rf /']}\n", r"expected a Debian package"),
        ("components:\n  jail: {pip: ../req.txt}\n", r"expected a path inside the site dir"),
        ("components:\n  jail: {pip: missing.txt}\n", r"components\.jail\.pip: no file"),
        ("components:\n  jail: {files: nowhere}\n", r"components\.jail\.files: no directory"),
        ("components:\n  jail: {pakages: [tree]}\n", r"components\.jail\.pakages"),
    ],
)
def test_bad_site_yaml_is_refused_with_the_file_and_key(tmp_path: Path, text, said) -> None:
    with pytest.raises(ConfigError, match=said) as caught:
        layer(tmp_path, text)
    assert str(tmp_path / "site.yaml") in str(caught.value)


def test_hadolint_findings_name_the_fragments_line(tmp_path: Path) -> None:
    (tmp_path / "frag.Dockerfile").write_text("ENV A=1\nRUN cd /opt && make\n")
    site = layer(tmp_path, "components:\n  login: {debs: [tree], fragment: frag.Dockerfile}\n")
    block = site.block("login")
    with pytest.raises(ConfigError, match=r"frag\.Dockerfile:2: hadolint: DL3003") as caught:
        site_layer.lint(FROM + block.text, block, site, "login")
    assert str(tmp_path / "frag.Dockerfile") in str(caught.value)


def test_a_requirement_whose_hash_does_not_match_is_refused(tmp_path: Path) -> None:
    wheel(tmp_path / "index")
    (tmp_path / "req.txt").write_text(requirements(tmp_path, "0" * 64))
    site = layer(tmp_path, "components:\n  worker: {pip: req.txt}\n")
    with pytest.raises(ConfigError, match=r"req\.txt: pip download for Python 3\.10 failed"):
        site.block("worker")
    assert not list((tmp_path / ".cache").rglob("*.whl"))  # nothing kept from a failed fetch


def test_an_arm64_image_gets_the_arm64_wheel_of_a_requirement(tmp_path: Path) -> None:
    """A requirement with a wheel per platform: each arch's image is given its own."""
    index = tmp_path / "index"
    index.mkdir()
    for platform in ("manylinux2014_x86_64", "manylinux2014_aarch64"):
        name = f"demo_pkg-1.0-py3-none-{platform}.whl"
        with zipfile.ZipFile(index / name, "w") as whl:
            whl.writestr("demo_pkg/__init__.py", "")
            info = "demo_pkg-1.0.dist-info"
            whl.writestr(
                f"{info}/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n"
            )
            whl.writestr(
                f"{info}/WHEEL",
                f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-{platform}\n",
            )
            whl.writestr(f"{info}/RECORD", "")
    (tmp_path / "req.txt").write_text(f"--no-index\n--find-links {index}\ndemo-pkg==1.0\n")
    site = layer(tmp_path, "components:\n  jail: {pip: req.txt}\n")
    wheels = {arch: sorted(n for n in site.block("jail", arch).files if n.endswith(".whl"))
              for arch in ("amd64", "arm64")}  # fmt: skip
    assert wheels == {
        "amd64": ["site/jail/pip/demo_pkg-1.0-py3-none-manylinux2014_x86_64.whl"],
        "arm64": ["site/jail/pip/demo_pkg-1.0-py3-none-manylinux2014_aarch64.whl"],
    }
