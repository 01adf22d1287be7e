"""slurmforge: one versions.yaml in, a tested matrix of Slurm container images out."""
