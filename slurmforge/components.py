"""The image components, declared once as data: which axes identify each (a component that does
not depend on CUDA is built once and tagged for every CUDA version of its cells), which
components it is built from, whether it is published, and what a cell of another arch takes
from builders on the native one. matrix.py expands them into targets."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Axis(StrEnum):
    DISTRO = "distro"
    SLURM = "slurm"
    CUDA = "cuda"
    # every component has it; a target's coordinates name it only when it is not the native
    # arch, so that amd64 targets keep the IDs and tags they had before the axis
    ARCH = "arch"


@dataclass(frozen=True)
class Component:
    name: str
    axes: tuple[Axis, ...]
    parents: tuple[str, ...]
    public: bool
    help: str
    # upstream artifacts its build context needs besides its features' (features.py)
    sources: tuple[str, ...] = ()
    # project directories (besides images/<name>/) and files of slurmforge itself
    # (slurmforge/…, read from the installed package) that join its build context
    context: tuple[str, ...] = ()
    # runs on the native arch whatever its cell's: it makes packages for the cell's arch there
    # (a cross-compile), from the native parents
    builder: bool = False


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in (
        Component("base", (Axis.DISTRO,), (), False, "distro root filesystem"),
        Component(
            "slurm-debs",
            (Axis.DISTRO, Axis.SLURM),
            ("base",),
            False,
            "Slurm, the jail SPANK plugin, pyxis and enroot compiled into .debs (internal builder)",
            sources=("slurm",),
            context=("jail/spank",),
            builder=True,
        ),
        Component(
            "runtime",
            (Axis.DISTRO, Axis.SLURM),
            ("base", "slurm-debs"),
            False,
            "munge, accounts, libslurm and the Slurm client",
        ),
        Component(
            "slurmctld",
            (Axis.DISTRO, Axis.SLURM),
            ("runtime", "slurm-debs"),
            True,
            "controller",
            context=("images/accounting",),
        ),
        Component(
            "slurmd",
            (Axis.DISTRO, Axis.SLURM),
            ("runtime", "slurm-debs"),
            True,
            "compute node daemon, with pyxis and enroot for containers in jobs; sshd for users "
            "with a job on it (pam_slurm_adopt)",
            context=("images/gpu", "images/login"),
        ),
        Component(
            "login",
            (Axis.DISTRO, Axis.SLURM),
            ("runtime", "slurm-debs"),
            True,
            "login node: client, sshd, nss_slurm",
        ),
        Component(
            "slurmdbd",
            (Axis.DISTRO, Axis.SLURM),
            ("runtime", "slurm-debs"),
            True,
            "accounting daemon (slurmdbd), storing into MariaDB/MySQL",
            context=("images/accounting",),
        ),
        Component(
            "slurmrestd",
            (Axis.DISTRO, Axis.SLURM),
            ("runtime", "slurm-debs"),
            True,
            "REST API (slurmrestd) with JWT authentication, as its own unprivileged user",
        ),
        Component(
            "exporter",
            (Axis.DISTRO, Axis.SLURM),
            ("runtime", "slurm-debs"),
            True,
            "Prometheus exporter of the cluster (Slurm's JSON output), unprivileged",
        ),
        Component(
            "portal",
            (Axis.DISTRO, Axis.SLURM),
            ("runtime", "slurm-debs"),
            True,
            "web portal: JupyterHub, starting each user's notebook server as a Slurm job",
        ),
        Component(
            "prometheus",
            (Axis.DISTRO,),
            ("base",),
            True,
            "Prometheus (and promtool) from the distro's archive",
        ),
        Component(
            "slapd",
            (Axis.DISTRO,),
            ("base",),
            True,
            "the embedded directory (identity.ldap.embedded): OpenLDAP from the distro's archive",
        ),
        Component(
            "mariadb",
            (Axis.DISTRO,),
            ("base",),
            True,
            "the accounting database: MariaDB from the distro's archive",
            # the scheduled backup (k8s) runs in this image: pod.py and what it imports
            context=(
                "slurmforge/errors.py",
                "slurmforge/deploy/backup/archive.py",
                "slurmforge/deploy/backup/snapshot.py",
                "slurmforge/deploy/backup/pod.py",
            ),
        ),
        Component(
            "nccl-tests",
            (Axis.DISTRO, Axis.CUDA),
            ("base",),
            False,
            "nccl-tests, compiled (for another arch: cross-compiled) on the builder's arch "
            "(internal builder)",
            # the cell's runtime and NCCL to link against (a cross-compile's target prefix)
            sources=("cuda", "nccl"),
            context=("images/gpu",),
            builder=True,
        ),
        # built beside the Slurm compile (it needs only the base), not after it in each jail
        Component(
            "jupyter",
            (Axis.DISTRO,),
            ("base",),
            False,
            "JupyterLab's venv for the jail, made on the builder's arch (internal builder)",
            builder=True,
        ),
        Component(
            "worker",
            (Axis.DISTRO, Axis.SLURM, Axis.CUDA),
            ("slurmd", "slurm-debs", "base", "nccl-tests"),
            True,
            "GPU compute node: slurmd (with enroot, pyxis) + CUDA user space, NCCL, nccl-tests",
            context=("images/gpu", "jail/gpu"),
        ),
        Component(
            "jail",
            (Axis.DISTRO, Axis.SLURM, Axis.CUDA),
            ("base", "slurm-debs", "jupyter", "nccl-tests"),
            True,
            "the users' shared root filesystem (with CUDA user space); populates a volume",
            context=("rootfs", "jail/populate", "images/gpu"),
        ),
    )
}
