"""Base images for `bootstrap` distros: mmdebstrap (pinned suite and mirror), then docker import.

With SOURCE_DATE_EPOCH set and the same package versions on the mirror, mmdebstrap writes the same
tarball bit for bit; the image is re-imported only when the inputs below change.

Another arch than the host's (arm64 on an amd64 host) is bootstrapped the same way: mmdebstrap
runs the foreign packages' maintainer scripts through qemu-user (binfmt_misc, which
`scripts/setup` registers) and checks that it can with arch-test. Its rootfs becomes an image of
that platform through a `FROM scratch` build (an import cannot set the image's architecture).
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from dataclasses import dataclass
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
    # An image layer is written once and committed whole by the engine: dpkg's fsync after each
    # file it unpacks protects nothing there and only makes every install layer wait on the disk.
    "force-unsafe-io",
)
# apt keeps neither the packages it downloads nor its binary caches of the package lists: without
# this every later `apt-get install` layer kept its .debs and caches under /var/cache/apt, 80 to
# 100 MB in each role image. Written into the rootfs once the bootstrap is done (an --aptopt would
# apply to the bootstrap's own downloads too, which mmdebstrap reads back from that cache).
_APT_CONF = (
    'APT::Keep-Downloaded-Packages "false";',
    'Dir::Cache::pkgcache "";',
    'Dir::Cache::srcpkgcache "";',
)
_APT_CONF_FILE = "/etc/apt/apt.conf.d/90slurmforge-no-cache"
# Every `apt-get update` (the bootstrap's and each install layer's: the lists are never kept)
# decompresses the suite's indexes, and under qemu-user on another arch's layers that took
# minutes of a fresh CI run. Without translations (English descriptions, about 32 MB of xz in
# bookworm's main alone) and with the gzip indexes ahead of xz (Debian serves both; gzip unpacks
# several times faster), it decompresses less and faster. mmdebstrap keeps --aptopt in the image.
_APT_INDEX_OPTS = (
    'Acquire::Languages "none"',
    'Acquire::CompressionTypes::Order { "gz"; }',
)


def _apt_conf_hook() -> str:
    """The shell command that writes _APT_CONF into the rootfs ($1), and removes the caches the
    bootstrap's own apt left (its cleanup, reading that file, no longer would)."""
    lines = " ".join(shlex.quote(line) for line in _APT_CONF)
    return f'printf "%s\\n" {lines} > "$1{_APT_CONF_FILE}" && rm -f "$1"/var/cache/apt/*.bin'


_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Base:
    """One distro's base for one arch."""

    spec: Bootstrap
    arch: str

    @property
    def platform(self) -> str:
        return f"linux/{self.arch}"


def manifest(base: Base) -> dict[str, object]:
    return {
        "bootstrap": {**base.spec.model_dump(mode="json"), "arch": base.arch},
        "dpkg": list(_DPKG_OPTS),
        "apt": list(_APT_INDEX_OPTS),
        "customize": _apt_conf_hook(),
    }


def command(base: Base, out: Path) -> list[str]:
    spec = base.spec
    cmd = [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        "--format=tar",
        f"--architectures={base.arch}",
        f"--components={','.join(spec.components)}",
        "--skip=output/dev",
        '--aptopt=Acquire::Retries "3"',
        *(f"--aptopt={opt}" for opt in _APT_INDEX_OPTS),
    ]
    cmd.append(f"--customize-hook={_apt_conf_hook()}")
    cmd += [f"--dpkgopt={opt}" for opt in _DPKG_OPTS]
    if spec.include:
        cmd.append(f"--include={','.join(spec.include)}")
    return [*cmd, spec.suite, str(out), spec.mirror]


def build_base(
    engine: Engine, base: Base, ref: str, labels: dict[str, str], log: IO[str], tmp_root: Path
) -> str:
    """Bootstrap ``base`` and import it as ``ref``; returns the image ID."""
    spec = base.spec
    if shutil.which("mmdebstrap") is None:
        raise BuildError(
            "mmdebstrap is not installed",
            hint="run `scripts/setup` (it runs apt-get install mmdebstrap)",
        )
    tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        epoch = str(spec.source_date_epoch)
        run(command(base, tarball), log=log, env={"SOURCE_DATE_EPOCH": epoch})
        changes = [f"ENV PATH={_PATH}", 'CMD ["bash"]']
        changes += [f"LABEL {k}={json.dumps(v)}" for k, v in sorted(labels.items())]
        if base.platform == engine.platform():
            print(f"+ docker import {tarball} {ref}", file=log, flush=True)
            return engine.import_tarball(str(tarball), ref, changes)
        step = f"+ FROM scratch, ADD {tarball.name} / ({base.platform}) as {ref}"
        print(step, file=log, flush=True)
        return engine.build_rootfs(tarball, ref, changes, base.platform)
