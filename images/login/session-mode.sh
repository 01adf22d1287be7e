# shellcheck shell=bash
# Sourced by slurmforge-entrypoint on the login node, and on a compute node before its sshd
# starts: SSH sessions get the umask that matches the cluster's home mode (the jail's
# slurmforge.conf says it: 077 for identity.home_mode 0700, 027 for 0750), and so do the jobs they
# submit (sbatch and srun pass it on); a directory user's first home (pam_mkhomedir) gets that mode.
jail_conf=${SLURMFORGE_JAIL_CONF:-/etc/slurmforge/jail/slurm}
session_umask=$(sed -n 's/^umask=//p' "$jail_conf/slurmforge.conf" 2> /dev/null || true)
[[ "$session_umask" =~ ^0[0-7]{3}$ ]] || session_umask=0077  # a cluster deployed before it said
sed -i -E "s/^(session[[:space:]]+optional[[:space:]]+pam_(mkhomedir|umask)\.so.*umask=)[0-7]+/\1$session_umask/" \
  /etc/pam.d/sshd
