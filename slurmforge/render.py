"""Render a target's Dockerfile and list its build context: the inputs that define the image."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import jinja2

from slurmforge import features, site_layer
from slurmforge.config import Config, Cuda
from slurmforge.errors import ConfigError
from slurmforge.matrix import COMPONENTS, BuildTarget
from slurmforge.pins import GNU_TYPES, NATIVE_ARCH

TEMPLATE = "Dockerfile.j2"
_TOOL = Path(__file__).resolve().parent.parent  # where the slurmforge package lies


@dataclass(frozen=True)
class ContextFile:
    arcname: str
    path: Path
    sha256: str
    mode: int


@dataclass(frozen=True)
class ContextFiles:
    """What a target's build context gets from upstream, and which optional features it lacks."""

    files: dict[str, ContextFile]  # need name → entry
    skipped: tuple[str, ...] = ()  # optional features whose sources could not be had


@dataclass(frozen=True)
class Rendered:
    target: BuildTarget
    dockerfile: str
    files: tuple[ContextFile, ...]
    lacking: tuple[str, ...] = ()  # features the image would carry but goes without
    site: site_layer.Block | None = None  # the site layer's part (at the Dockerfile's end)
    # (component, reference) of each parent published under the set's registry
    public_parents: tuple[tuple[str, str], ...] = ()

    def manifest(self, parent_ids: dict[str, str]) -> dict[str, object]:
        """Everything that defines the image, as sorted data; its hash is the cache key. The
        site layer's inputs are apart (``site``), so that a plan names the one that changed.
        A parent counts by its image ID: the reference a public one is named by in the
        Dockerfile, which carries the set's registry, is set aside (internal parents' references
        are the same in every set), so two sets that differ only in their registry give every
        image of a cell they share one hash and the second set tags the first one's images."""
        own = self.dockerfile
        site_files: set[str] = set()
        if self.site is not None:
            own = own[: own.index(site_layer.HOOK)]
            site_files = set(self.site.files)
        for component, ref in self.public_parents:
            own = own.replace(ref, f"<{component}>")
        manifest: dict[str, object] = {
            "dockerfile": _sha(own.encode()),
            "files": {
                f.arcname: f"{f.mode:o}:{f.sha256}"
                for f in self.files
                if f.arcname not in site_files
            },
            "parents": dict(sorted(parent_ids.items())),
        }
        if self.site is not None:
            manifest["site"] = dict(sorted(self.site.inputs.items()))
        if self.target.arch != NATIVE_ARCH:  # (absent for amd64: its hashes stay as they were)
            manifest["arch"] = self.target.arch
        return manifest

    def write_context(self, out: IO[bytes]) -> None:
        """A deterministic tar of the build context (Dockerfile first, then files by name)."""
        with tarfile.open(fileobj=out, mode="w") as tar:
            data = self.dockerfile.encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
            for f in self.files:
                info = tar.gettarinfo(str(f.path), arcname=f.arcname)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                with f.path.open("rb") as fh:
                    tar.addfile(info, fh)


def inputs_hash(manifest: dict[str, object]) -> str:
    return _sha(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tree(root: Path, prefix: str) -> list[ContextFile]:
    files = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.name == TEMPLATE or "__pycache__" in path.parts:
            continue
        files.append(_context_file(prefix + path.relative_to(root).as_posix(), path))
    return files


def _context_file(arcname: str, path: Path) -> ContextFile:
    """``path`` in the build context as ``arcname`` (executable or not: the only mode kept)."""
    mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
    return ContextFile(arcname, path, _file_sha(path), mode)


def _gencode(cuda: Cuda | None) -> str:
    """nvcc flags: SASS for each configured generation, plus PTX of the newest for later GPUs."""
    if cuda is None:
        return ""
    numbers = sorted((a.removeprefix("sm_") for a in cuda.arches), key=int)
    flags = [f"-gencode=arch=compute_{n},code=sm_{n}" for n in numbers]
    return " ".join([*flags, f"-gencode=arch=compute_{numbers[-1]},code=compute_{numbers[-1]}"])


class DockerfileRenderer:
    def __init__(self, config: Config, images_dir: Path | None = None) -> None:
        self.config = config
        self.images_dir = images_dir or config.root / "images"
        public = sorted(n for n, c in COMPONENTS.items() if c.public)
        self.site = site_layer.load(config.root, config.versions.site, public)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(self.images_dir),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,
            auto_reload=False,  # one run renders thousands of targets from unchanged templates
        )
        self._files: dict[str, list[ContextFile]] = {}

    def component_files(self, component: str) -> list[ContextFile]:
        """images/<component>/ at the context root, plus its extra project directories and
        files by path; read and hashed once per renderer (every cell's target shares them)."""
        if component not in self._files:
            self._files[component] = self._component_files(component)
        return list(self._files[component])

    def _component_files(self, component: str) -> list[ContextFile]:
        files = _tree(self.images_dir / component, "")
        for extra in COMPONENTS[component].context:
            # the project's files beside images/; slurmforge's own code from this slurmforge
            path = (_TOOL if extra.startswith("slurmforge/") else self.images_dir.parent) / extra
            if path.is_file():
                files.append(_context_file(extra, path))
            elif path.is_dir():
                files += _tree(path, extra + "/")
            else:  # a checkout without it would build an image that lacks it
                raise ConfigError(f"{path}: missing: {component}'s build context needs it")
        return files

    def render(
        self,
        target: BuildTarget,
        parent_refs: dict[str, str],
        upstream: ContextFiles | None = None,
        lacking: tuple[str, ...] = (),
    ) -> Rendered:
        """``parent_refs``: component → image reference; ``upstream``: fetched artifacts;
        ``lacking``: optional features skipped here or in a parent (project.rendered says)."""
        upstream = upstream or ContextFiles({})
        v = self.config.versions
        distro = v.distros[target.distro]
        absent = set(lacking) | set(upstream.skipped)
        carried = [f for f in features.carried_by(target.component) if f not in absent]
        built = [f.name for f in features.built_in(target.component) if f.name not in absent]
        wheels: dict[str, list[str]] = {}
        singles: dict[str, str] = {}
        for name, f in upstream.files.items():
            group, _, index = name.partition("/")
            if index:
                wheels.setdefault(group, []).append(f.arcname)
            else:
                singles[group] = f.arcname
        values = {
            "distro": target.distro,
            # the arch the image is for, and the one a builder (slurm-debs) runs on
            "arch": target.arch,
            "build_arch": NATIVE_ARCH,
            "gnu_type": GNU_TYPES[target.arch],  # its cross toolchain's prefix (aarch64-linux-gnu)
            "slurm": target.slurm,
            "cuda": target.cuda,
            "distro_image": distro.image,
            "accounts": v.accounts,
            "parents": {k.replace("-", "_"): ref for k, ref in parent_refs.items()},
            "cuda_spec": v.cuda.get(target.cuda or ""),
            # tool → (version, sources or Userspace) built for this target: a multi-release
            # tool's pick by the target's Slurm or CUDA (only where the target has that axis)
            "tools": {
                name: v.release(name, target.slurm, target.cuda)
                for name, tool in v.tools.items()
                if not tool.releases or getattr(target, features.FEATURES[name].axis)
            },
            "sources": singles,  # feature → arcname, only the features that are present
            "wheels": wheels,  # userspace group → arcnames of its wheels (or apt keyring)
            # features built or installed here ({% if "pyxis" in features %}), the ones the image
            # carries (its io.slurmforge.features label) and the ones it goes without
            "features": built + carried,
            "carried": carried,
            "feature_debs": [d for f in carried for d in features.FEATURES[f].debs],
            "skipped": sorted(absent & set(features.carried_by(target.component))),
            "nvcc_gencode": _gencode(v.cuda.get(target.cuda or "")),
            "slurm_tarball": singles.get("slurm"),
            "slurm_build_deps": v.slurm[target.slurm].build_deps if target.slurm else (),
        }
        name = f"{target.component}/{TEMPLATE}"
        try:
            dockerfile = self.env.get_template(name).render(**values)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(f"{self.images_dir / name}:{exc.lineno}: {exc.message}") from None
        except jinja2.TemplateError as exc:
            raise ConfigError(f"{self.images_dir / name}: {exc.message}") from None
        files = self.component_files(target.component) + list(upstream.files.values())
        block = self.site.block(target.component, target.arch) if self.site else None
        if block is not None:
            assert self.site is not None
            dockerfile = dockerfile.rstrip("\n") + "\n" + block.text
            site_layer.lint(dockerfile, block, self.site, target.component)
            files += [_context_file(arcname, path) for arcname, path in block.files.items()]
        files.sort(key=lambda f: f.arcname)
        public = tuple((c, ref) for c, ref in sorted(parent_refs.items()) if COMPONENTS[c].public)
        skipped = tuple(values["skipped"])
        return Rendered(target, dockerfile, tuple(files), skipped, block, public)
