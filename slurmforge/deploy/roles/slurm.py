"""Slurm's own roles: the controller, the compute nodes, the login node, and the jail populate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge import jail_contract
from slurmforge.deploy.roles.accounting import DBD, JWT
from slurmforge.deploy.roles.base import (
    CONTROLLER,
    CONTROLLER_STATE,
    JAIL,
    JAIL_CONF,
    LOGIN,
    MUNGE,
    NODE,
    POPULATE,
    SLURM_CONF,
)
from slurmforge.deploy.roles.identity import DIRECTORY, IDENTITY_CONF, LDAP_BIND
from slurmforge.deploy.roles.power import NODE_POWER
from slurmforge.deploy.roles.records import DAEMON, Port, Probe, Resources, Role

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


def _node_env(spec: ClusterSpec) -> dict[str, str]:
    # images/slurmd/sshd.sh: sshd for users with a job on the node (slurm.node_ssh)
    return {} if spec.slurm.node_ssh else {"SLURMFORGE_NODE_SSHD": "0"}


def _login_env(spec: ClusterSpec) -> dict[str, str]:
    scratch = spec.jail.scratch
    return {jail_contract.SCRATCH_ENV: " ".join(scratch)} if scratch else {}


CONTROLLER_ROLE = Role(
    CONTROLLER,
    image=CONTROLLER,
    command=("slurmforge-slurmctld",),  # slurmctld -D (images/slurmctld/slurmctld-run)
    ports=(Port("slurmctld", 6817),),
    probe=Probe(pid_file="/var/run/slurmctld.pid"),
    secrets=(MUNGE, JWT, LDAP_BIND),
    configs=(SLURM_CONF, IDENTITY_CONF),
    # read-only: users and groups come from the jail's /etc (libnss-extrausers)
    jail="ro",
    data=CONTROLLER_STATE,
    capabilities=DAEMON,
    # nodes first: slurmctld resolves every node name when it starts (slurmd retries until
    # the controller answers)
    stable_name=True,  # the nodes reach slurmctld-0.slurmctld
    after=(NODE, DBD, DIRECTORY, NODE_POWER),
    resources=Resources(("500m", "512Mi"), ("2", "2Gi")),
)


NODE_ROLE = Role(
    NODE,
    image=None,
    workload="nodes",
    command=("slurmd", "-D", "-N", "{node}"),
    container="slurmd",
    ports=(Port("slurmd", 6818),),
    probe=Probe(pid_file="/var/run/slurmd.pid"),
    secrets=(MUNGE, LDAP_BIND),
    configs=(SLURM_CONF, JAIL_CONF, IDENTITY_CONF),
    jail="rw",
    # slurmstepd (root) sets a task's CPU affinity after the task switched to its user, which
    # the kernel allows a caller that is not the task's owner only with SYS_NICE; the base
    # layer's node sets add SYS_ADMIN (the jail plugin's private mount namespace)
    capabilities=(*DAEMON, "SYS_CHROOT", "SYS_NICE"),
    runs_users=True,
    runs_containers=True,
    after=(DIRECTORY,),  # SSSD answers from the start (offline until the directory is)
    env=_node_env,
)


LOGIN_ROLE = Role(
    LOGIN,
    image=LOGIN,
    command=("/usr/sbin/sshd", "-D", "-e"),
    ports=(Port("ssh", 22, publish="login.port", service_port=22),),
    probe=Probe(pid_file="/run/sshd.pid"),
    secrets=(MUNGE, LDAP_BIND),
    configs=(SLURM_CONF, JAIL_CONF, IDENTITY_CONF),
    jail="rw",
    # sshd chroots sessions into the jail, which needs /proc, /dev, the munge socket and the
    # client config mounted inside it (images/login/jail-mounts.sh)
    capabilities=(*DAEMON, "AUDIT_WRITE", "NET_BIND_SERVICE", "SYS_ADMIN", "SYS_CHROOT"),
    runs_users=True,
    stable_name=True,  # `invoke login`, kubectl exec login-0
    after=(CONTROLLER,),
    resources=Resources(("250m", "256Mi"), ("2", "2Gi")),
    env=_login_env,
)


POPULATE_ROLE = Role(
    POPULATE,
    image=JAIL,
    workload="job",
    command=(jail_contract.ROOT,),
    jail="rw",
    # copies a root filesystem with its owners, modes and file capabilities
    capabilities=("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD", "SETFCAP"),
    resources=Resources(("500m", "512Mi"), ("2", "2Gi")),
)
