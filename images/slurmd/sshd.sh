# shellcheck shell=bash
# Sourced by slurmforge-entrypoint on a compute node: sshd, for users to reach the node of a job
# they run (htop, py-spy, nvidia-smi on it). pam_slurm_adopt lets in only a user with a job here
# (root aside) and puts the session into that job's cgroup, as one of its processes; the session
# is chrooted into the jail with the login node's runtime mounts (jail-mounts.sh) and uses the
# cluster's host keys, which live in the jail (ssh-host-keys.sh). Keys: the user's own
# ~/.ssh/authorized_keys in the shared home, or the directory's (identity.sh).
# A node started without a populated jail (an image on its own) runs no sshd: there is nowhere to
# put a session.
if [[ "${SLURMFORGE_NODE_SSHD:-1}" == 1 && -r "${SLURMFORGE_JAIL_ROOT:-/jail}/.slurmforge/populated" ]]; then
  # shellcheck source=/dev/null
  source /usr/lib/slurmforge/sshd/jail-mounts.sh
  # shellcheck source=/dev/null
  source /usr/lib/slurmforge/sshd/ssh-host-keys.sh
  # shellcheck source=/dev/null
  source /usr/lib/slurmforge/sshd/session-mode.sh
  install -d -m 0755 /run/sshd
  /usr/sbin/sshd
fi
