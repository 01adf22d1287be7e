"""Base images for `bootstrap` distros: mmdebstrap (pinned suite and mirror), then docker import.

With SOURCE_DATE_EPOCH set and the same package versions on the mirror, mmdebstrap writes the same
tarball bit for bit; the image is re-imported only when the inputs below change.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import IO

from slurmforge.config import Bootstrap
from slurmforge.engine import Engine
from slurmforge.errors import BuildError
from slurmforge.proc import run

# Documentation is not needed in containers; the same rule keeps later layers small too, because
# mmdebstrap writes --dpkgopt into the image's dpkg configuration.
_DPKG_OPTS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def manifest(spec: Bootstrap) -> dict[str, object]:
    return {"bootstrap": spec.model_dump(mode="json"), "dpkg": list(_DPKG_OPTS)}


def command(spec: Bootstrap, out: Path) -> list[str]:
    cmd = [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        "--format=tar",
        f"--architectures={spec.arch}",
        f"--components={','.join(spec.components)}",
        "--skip=output/dev",
        '--aptopt=Acquire::Retries "3"',
    ]
    cmd += [f"--dpkgopt={opt}" for opt in _DPKG_OPTS]
    if spec.include:
        cmd.append(f"--include={','.join(spec.include)}")
    return [*cmd, spec.suite, str(out), spec.mirror]


def build_base(
    engine: Engine, spec: Bootstrap, ref: str, labels: dict[str, str], log: IO[str], tmp_root: Path
) -> str:
    """Bootstrap ``spec`` and import it as ``ref``; returns the image ID."""
    if shutil.which("mmdebstrap") is None:
        raise BuildError(
            "mmdebstrap is not installed",
            hint="run `scripts/setup` (it runs apt-get install mmdebstrap)",
        )
    tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        run(command(spec, tarball), log=log, env={"SOURCE_DATE_EPOCH": str(spec.source_date_epoch)})
        changes = [f"ENV PATH={_PATH}", 'CMD ["bash"]']
        changes += [f"LABEL {k}={json.dumps(v)}" for k, v in sorted(labels.items())]
        print(f"+ docker import {tarball} {ref}", file=log, flush=True)
        return engine.import_tarball(str(tarball), ref, changes)
