"""Loading versions.yaml: its schema (config.py), the references between its parts, the lock
file beside it, and every image tag its sets make (matrix.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmforge import matrix, state
from slurmforge.config import Config, Tool, Versions
from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import format_path, read_yaml, validate


def load(path: Path) -> Config:
    """Parse and validate ``path`` (and its lock file); raise ConfigError with file and key path."""
    versions = validate(Versions, read_yaml(path), path)
    _check_references(path, versions)
    config = Config(path=path, versions=versions, locked=state.read_sources_lock(path))
    matrix.check_tags(config)
    return config


def _check_references(path: Path, v: Versions) -> None:
    known = {"distro": v.distros, "slurm": v.slurm, "cuda": v.cuda}
    label = {"distro": "distro", "slurm": "Slurm version", "cuda": "CUDA version"}
    for set_name, mset in v.sets.items():
        if mset.matrix is not None:
            for axis in ("distro", "slurm", "cuda"):
                values = getattr(mset.matrix, axis)
                for i, value in enumerate(values):
                    if value not in known[axis]:
                        _unknown(
                            path,
                            ("sets", set_name, "matrix", axis, i),
                            label[axis],
                            value,
                            known[axis],
                        )
                if len(set(values)) != len(values):
                    raise ConfigError(
                        f"{path}: {format_path(('sets', set_name, 'matrix', axis))}: "
                        f"duplicate entries in {list(values)}"
                    )
        for i, cell in enumerate(mset.include):
            for axis in ("distro", "slurm", "cuda"):
                value = getattr(cell, axis)
                if value not in known[axis]:
                    _unknown(
                        path,
                        ("sets", set_name, "include", i, axis),
                        label[axis],
                        value,
                        known[axis],
                    )
    for name, tool in v.tools.items():
        releases = tool.releases if isinstance(tool, Tool) else {}
        for version, slurm in v.slurm.items():
            picked = slurm.tools.get(name)
            where = format_path(("slurm", version, "tools", name))
            if releases and picked is None:
                raise ConfigError(
                    f"{path}: {where}: required key is missing (tools.{name} has several "
                    f"releases; pick one of {', '.join(releases)} for Slurm {version})"
                )
            if picked is not None and picked not in releases:
                raise ConfigError(
                    f"{path}: {where}: unknown release {picked!r}; expected one of "
                    f"{', '.join(releases) or '(none: the tool has no releases)'}"
                )
    for version, slurm in v.slurm.items():
        for name in slurm.tools:
            if name not in v.tools:
                raise ConfigError(
                    f"{path}: {format_path(('slurm', version, 'tools', name))}: unknown tool"
                )
    for name, distro in v.distros.items():
        if distro.bootstrap and not distro.bootstrap.mirror.startswith(("http://", "https://")):
            raise ConfigError(
                f"{path}: distros.{name}.bootstrap.mirror: expected an http(s) Debian mirror"
            )


def _unknown(
    path: Path, loc: tuple[str | int, ...], what: str, value: str, known: dict[str, Any]
) -> None:
    raise ConfigError(
        f"{path}: {format_path(loc)}: unknown {what} {quote(value)}; "
        f"expected one of {', '.join(sorted(known))}"
    )
