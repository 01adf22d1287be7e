"""Deployment: one typed cluster model, rendered to Slurm config and to a target's manifests;
here, a cluster file read as a target reads it (load_cluster). The entry points the deploy-side
tasks call are in commands.py, which no target imports.

The parts, each importing only those before it (docs/development/layout.md, test_layout.py):
spec/ (the cluster file's schema and the checks across its parts), identity/ (SSSD and the
directory), target.py (what a target is, and where to add one), roles/ (what a cluster runs,
for every target: where to add a role or a secret), slurm/ (Slurm's own files, settings,
accounts, database and commands), monitoring.py, backup/ (the archive and taking one),
loader.py (reading a cluster file), and one package per target, local/ and k8s/.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import Cluster
    from slurmforge.deploy.target import Where


def load_cluster(where: Where) -> tuple[Cluster, Path]:
    """The cluster file's model, bound to versions.yaml's images; and that file's directory."""
    from slurmforge import state
    from slurmforge.deploy import loader
    from slurmforge.versions import load as load_versions

    versions = load_versions(where.versions_file)
    return loader.load(where.cluster_file, versions, state.read_scale), versions.root
