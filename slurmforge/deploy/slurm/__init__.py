"""Slurm's own side of a cluster: its config files, the site's settings, accounts and QoS, the
accounting database, commands run in slurmctld, and which series may follow which."""
