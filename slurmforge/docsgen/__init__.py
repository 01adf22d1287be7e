"""What the docs site generates from the code, so that it cannot drift from it: the reference pages
(tasks, both files' keys, images, metrics) and the JSON Schemas editors read. ``write`` puts
them in place; ``stale`` names those that differ from what the code makes now (the unit tier
fails on any, and `invoke docs --check` lists them)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from slurmforge.state import write_text


def _pages(root: Path) -> dict[str, Callable[[], str]]:
    from slurmforge.docsgen import cluster, keys, schema, tasks

    cluster_intro = (
        "Every key a cluster file (`deploy/cluster.yaml`, or the file `--cluster` names) may "
        "hold, with its type, default, constraints and what it does. A key not listed here is "
        "refused, by the loader (exit 2, one line naming the file and the key) and by the "
        "schema editors read (`schema/cluster.schema.json`). Node sets may take their keys "
        "from layered `definitions` ([site configuration](../how-to/site-configuration.md)). "
        "Generated from the models in `slurmforge/deploy/spec/`."
    )
    versions_intro = (
        "Every key of `versions.yaml`: the distros, Slurm and CUDA versions and tools images are "
        "built from, and the matrix sets that group them into cells. A key not listed here is "
        "refused (and by `schema/versions.schema.json`). Generated from the models in "
        "`slurmforge/config.py`, `slurmforge/userspace.py` and `slurmforge/pins.py`."
    )
    return {
        "docs/reference/tasks.md": lambda: tasks.page(root),
        "docs/reference/cluster-yaml.md": lambda: keys.page(
            schema.cluster(), "cluster.yaml", cluster_intro, root / "deploy" / "cluster.yaml"
        ),
        "docs/reference/versions-yaml.md": lambda: keys.page(
            schema.versions(), "versions.yaml", versions_intro, root / "versions.yaml"
        ),
        "docs/reference/images.md": lambda: cluster.images_page(root),
        "docs/reference/metrics.md": lambda: cluster.metrics_page(root),
        "docs/reference/files.md": lambda: cluster.files_page(root),
        **{
            f"{schema.DIR}/{file}": (lambda name=name: schema.text(name))
            for name, file in schema.FILES.items()
        },
    }


def write(root: Path) -> list[str]:
    """Write every generated file under ``root`` that differs; the paths written."""
    written = []
    for path, make in _pages(root).items():
        target = root / path
        text = make()
        if not target.is_file() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text(target, text)
            written.append(path)
    return written


def stale(root: Path) -> list[str]:
    """The generated files under ``root`` that are missing or differ from what the code makes."""
    return [
        path
        for path, make in _pages(root).items()
        if not (root / path).is_file() or (root / path).read_text() != make()
    ]


# -- the site: mkdocs, on the generated pages --------------------------------------------------

SITE_MARK = ".slurmforge-site"  # in a directory `invoke docs --build` wrote, which it may rebuild


def _mkdocs(root: Path, *args: str) -> None:
    from slurmforge.errors import SlurmforgeError

    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", *args], cwd=root, env=env, check=False)
    if proc.returncode != 0:
        raise SlurmforgeError(f"mkdocs {args[0]} failed (exit {proc.returncode}; see above)")


def build(root: Path, out: Path) -> None:
    """The site, generated pages first, written into ``out``: a new or empty directory, or one
    this wrote before (mkdocs empties the directory it builds into)."""
    from slurmforge.errors import ConfigError, quote

    if out.is_dir() and any(out.iterdir()) and not (out / SITE_MARK).is_file():
        raise ConfigError(
            f"--build {quote(str(out))}: not empty, and no site `invoke docs --build` wrote; "
            "expected a new or empty directory"
        )
    out.mkdir(parents=True, exist_ok=True)
    # before the build, so that one that fails leaves a directory the next may build into
    (out / SITE_MARK).write_text("written by `invoke docs --build`; rebuilt in place\n")
    write(root)
    _mkdocs(root, "build", "--strict", "--site-dir", str(out))


def serve(root: Path, port: int) -> None:
    """The site on http://127.0.0.1:PORT/, rebuilt as pages change (generated pages first)."""
    write(root)
    _mkdocs(root, "serve", "--strict", "--dev-addr", f"127.0.0.1:{port}")
