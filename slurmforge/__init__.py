"""slurmforge: one versions.yaml in, a tested matrix of Slurm container images out."""

# Semantic versioning (semver.org): the cluster file, versions.yaml, the tasks' options and the
# backup archive are the public interface; CHANGELOG.md says what each release changed.
__version__ = "0.9.0"
