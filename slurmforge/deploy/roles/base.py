"""What every cluster has, which the features' roles name: the Slurm roles' names, the munge key,
Slurm's configuration (the daemons' and the jail's client subset) and slurmctld's saved state.
"""

from __future__ import annotations

from slurmforge import jail_contract
from slurmforge.deploy.roles.records import ConfigDir, Data, Secret

# Role names: also their Compose services and their objects' names on Kubernetes and, where a
# role has an image of its own, its component in versions.yaml. JAIL is a component only: the
# image that jail-populate copies into the shared root.
CONTROLLER, LOGIN, JAIL = "slurmctld", "login", "jail"

CONTROLLER_BACKUP = "slurmctld-backup"  # the backup slurmctld's service (controller.replicas: 2)

NODE, POPULATE = "node", "jail-populate"

MUNGE = Secret("munge.key", "munge-key", "MUNGE_KEY_FILE", "/etc/slurmforge/munge", 1024, False)

SLURM_CONF = ConfigDir("slurm-config", "etc/slurm", "/etc/slurm")

# the jail's client subset (slurm.conf, plugstack.conf, ...), bound onto the jail's /etc/slurm
JAIL_CONF = ConfigDir("slurm-jail-config", "jail/etc/slurm", jail_contract.CONF)

# slurmctld's StateSaveLocation
CONTROLLER_STATE = Data("/var/spool/slurmctld", "state", "state", "state", owner="slurm:slurm")
