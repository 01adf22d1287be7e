"""What slurmforge and the jail image agree on: one place for populate's inputs and outputs.

The jail image's entrypoint (jail/populate) copies the image into the directory it is given. It
reads its inputs from the environment (``populate_env``) and leaves two files behind, which make
a directory a jail (see README, "The jail"): MARKER, written before the first copy, and SENTINEL,
holding the image ID, written after a complete one. `invoke jail-populate`, the Compose file's
populate service and the k8s populate Job all start it through this module, and every pod that
waits for the jail reads SENTINEL.
"""

from __future__ import annotations

from collections.abc import Iterable

ROOT = "/jail"  # where populate copies to, and where every node and login sees the jail
# where the nodes and the login see the jail's client config (bound onto the jail's /etc/slurm)
CONF = "/etc/slurmforge/jail/slurm"
MARKER = ".slurmforge/jail"
SENTINEL = ".slurmforge/populated"
DIGEST_ENV = "SLURMFORGE_JAIL_DIGEST"  # the image ID that SENTINEL records
KEEP_ENV = "SLURMFORGE_JAIL_KEEP"  # absolute paths kept across populates, space-separated
RSYNC_OPTS_ENV = "SLURMFORGE_JAIL_RSYNC_OPTS"  # more rsync options (e.g. --bwlimit)
SCRATCH_ENV = "SLURMFORGE_JAIL_SCRATCH"  # for the login's entrypoint: shared scratch dirs to make


def populate_env(digest: str, keep: Iterable[str], rsync_opts: str = "") -> dict[str, str]:
    """populate's environment: copy the image ``digest``, keeping ``keep``."""
    env = {DIGEST_ENV: digest, KEEP_ENV: " ".join(keep)}
    if rsync_opts:
        env[RSYNC_OPTS_ENV] = rsync_opts
    return env


def sentinel(root: str = ROOT) -> str:
    return f"{root}/{SENTINEL}"
