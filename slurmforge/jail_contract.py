"""The jail's contract: every name slurmforge, the jail image, the login node's hooks and the
jail SPANK plugin agree on, in one place (tests/unit/test_jail_contract.py checks each against
the shell and C that use it).

- populate (jail/populate/populate, the jail image's entrypoint) copies the image into the
  directory it is given. It reads its inputs from the environment (``populate_env``) and leaves
  two files behind, which make a directory a jail (docs/explanation/jail.md): MARKER, written before
  the first copy, and SENTINEL, holding the image ID, written after a complete one. `invoke
  jail-populate`, the Compose file's populate service and the k8s populate Job all start it
  through this module, and every pod that waits for the jail reads SENTINEL.
- The login node (images/login/jail-mounts.sh, ssh-host-keys.sh) finds the jail at ROOT and its
  client config at CONF, unless ROOT_ENV / CONF_ENV say otherwise, and makes the cluster's
  shared scratch directories named in SCRATCH_ENV.
- The SPANK plugin (jail/spank/slurmforge_jail.c) takes its paths as ``plugin_args`` in
  plugstack.conf; on a node whose slurmd has MODE_ENV set to one of MODES it does less.
"""

from __future__ import annotations

from collections.abc import Iterable

ROOT = "/jail"  # where populate copies to, and where every node and login sees the jail
# where the nodes and the login see the jail's client config (bound onto the jail's /etc/slurm)
CONF = "/etc/slurmforge/jail/slurm"
MARKER = ".slurmforge/jail"
SENTINEL = ".slurmforge/populated"

# populate's inputs
DIGEST_ENV = "SLURMFORGE_JAIL_DIGEST"  # the image ID that SENTINEL records
KEEP_ENV = "SLURMFORGE_JAIL_KEEP"  # absolute paths kept across populates, space-separated
RSYNC_OPTS_ENV = "SLURMFORGE_JAIL_RSYNC_OPTS"  # more rsync options (e.g. --bwlimit)
# "usr": copy the image's /usr alone, into a volume that nodes of another arch than the jail's
# mount over the jail's /usr (a jail's arch lives under /usr: Debian's /bin, /lib and /sbin are
# links into it, and the jail's ld cache is kept there, at LD_CACHE)
PART_ENV = "SLURMFORGE_JAIL_PART"
# absolute paths of the image that populate leaves out, space-separated (and removes from a jail
# that holds them): what only a feature the cluster does not enable uses. SENTINEL then records
# them after the image ID, so that enabling the feature populates again.
SKIP_ENV = "SLURMFORGE_JAIL_SKIP"
USR = "/usr"
LD_CACHE = "/usr/lib/slurmforge/ld.so.cache"  # /etc/ld.so.cache links to it

# the login node's hooks
ROOT_ENV = "SLURMFORGE_JAIL_ROOT"  # the jail, when not at ROOT
CONF_ENV = "SLURMFORGE_JAIL_CONF"  # the client config, when not at CONF
SCRATCH_ENV = "SLURMFORGE_JAIL_SCRATCH"  # shared scratch dirs to make, space-separated

# the SPANK plugin
PLUGIN = "/usr/lib/slurmforge/spank/jail.so"
PLUGIN_OPTIONS = ("root", "conf", "spool", "jobs", "local")  # each takes an absolute path
MODE_ENV = "SLURMFORGE_JAIL"  # in slurmd's environment: a node set's `env`
MODES = ("off", "task-tmp", "shared-pid")  # steps on the node's own root; the jail with a /tmp per
# task; the jail with no PID namespace per step (bench/b7_jobs.py compares them)


def populate_env(
    digest: str,
    keep: Iterable[str],
    rsync_opts: str = "",
    usr_only: bool = False,
    skip: Iterable[str] = (),
) -> dict[str, str]:
    """populate's environment: copy the image ``digest`` but for ``skip``, keeping ``keep``
    (``usr_only``: its /usr alone, for nodes of another arch; it keeps nothing, holding no user
    state)."""
    env = {DIGEST_ENV: digest, KEEP_ENV: "" if usr_only else " ".join(keep)}
    if rsync_opts:
        env[RSYNC_OPTS_ENV] = rsync_opts
    if usr_only:
        env[PART_ENV] = "usr"
    if skip := " ".join(skip):
        env[SKIP_ENV] = skip
    return env


def record(digest: str, skip: Iterable[str] = ()) -> str:
    """What SENTINEL holds once the image ``digest`` is copied but for ``skip``."""
    return " without ".join(filter(None, (digest, " ".join(skip))))


def sentinel(root: str = ROOT) -> str:
    return f"{root}/{SENTINEL}"


def plugin_args(spool: str, local: str | None = None) -> str:
    """The plugin's arguments in plugstack.conf: the jail, its client config, slurmd's spool
    and (with containers) the node-local directory for container roots."""
    args = {"root": ROOT, "conf": CONF, "spool": spool, "local": local}
    return " ".join(f"{k}={v}" for k, v in args.items() if v)
