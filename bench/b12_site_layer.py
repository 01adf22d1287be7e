"""B12: a site-layer change — which targets rebuild and how long it takes — against a full cell
build, in the same run.

On a copy of the project with its own registry (the project's tags stay): a first build makes its
tags (from the layer cache); then a site layer is added (a Debian package and a file to the jail,
a hash-pinned pip requirement to the worker), then one file of it changes, each built and timed.
The baseline is a full build of the same cell: slurm-debs made new (a line no cache has, before
the compile), so Slurm is compiled again and every image of the cell built on it (all but the
mmdebstrap base and MariaDB). The project's own images are rebuilt at the end to put its shared
internal tags (slurm-debs, runtime) back.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path

import docker
import yaml

from bench.common import built, copy_project, invoke
from tests.build.helpers import REGISTRY, WHEEL_SHA256, site_layer_copy


def main() -> None:
    invoke("build", "--set", "default")
    client = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        root = copy_project(Path(tmp))
        data = yaml.safe_load((root / "versions.yaml").read_text())
        data["sets"]["default"]["registry"] = REGISTRY
        (root / "versions.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        try:
            invoke("build", root=root)
            site_layer_copy(root, WHEEL_SHA256)
            data["site"] = "site"
            (root / "versions.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
            shutil.rmtree(root / ".cache" / "site-wheels", ignore_errors=True)
            added = invoke("build", root=root)
            print(f"B12 site layer added: rebuilt {built(root)} in {added:.1f} s")
            (root / "site" / "files" / "etc" / "site-release").write_text("changed\n")
            changed = invoke("build", root=root)
            print(f"B12 one site file changed: rebuilt {built(root)} in {changed:.1f} s")
            noop = invoke("build", root=root)
            print(f"B12 nothing changed: rebuilt {built(root)} in {noop:.2f} s")
            template = root / "images" / "slurm-debs" / "Dockerfile.j2"
            lines = template.read_text().splitlines(keepends=True)
            at = max(i for i, ln in enumerate(lines) if ln.startswith("FROM ")) + 1
            lines.insert(at, f"RUN echo 'bench B12 {uuid.uuid4().hex}'\n")
            template.write_text("".join(lines))
            start = time.perf_counter()
            invoke("build", root=root)
            full = time.perf_counter() - start
            rebuilt = built(root)
            print(
                f"B12 full cell build (Slurm compiled again): {len(rebuilt)} targets, {full:.1f} s"
            )
            print(f"B12 ratio site-file change / full cell build: {changed / full:.3f}")
            print(f"B12 ratio site layer added / full cell build: {added / full:.3f}")
        finally:
            for image in client.images.list(name=f"{REGISTRY}/*"):
                for tag in image.tags:
                    if tag.startswith(REGISTRY):
                        client.images.remove(tag, noprune=True)
    restore = invoke("build", "--set", "default")
    print(f"B12 restore the project's images: rebuilt {built()} in {restore:.1f} s")


if __name__ == "__main__":
    main()
