# shellcheck shell=bash
# Sourced by slurmforge-entrypoint on the login node, and on a compute node before its sshd
# starts: SSH sessions get the umask that matches the cluster's home mode (identity.home_mode in
# the jail's slurmforge.conf: 0700 gives 077, 0750 gives 027), and so do the jobs they submit
# (sbatch and srun pass it on); a directory user's first home (pam_mkhomedir) gets that mode.
jail_conf=${SLURMFORGE_JAIL_CONF:-/etc/slurmforge/jail/slurm}
home_mode=$(sed -n 's/^home_mode=//p' "$jail_conf/slurmforge.conf" 2> /dev/null || true)
case "$home_mode" in
  0750) session_umask=0027 ;;
  *) session_umask=0077 ;;
esac
sed -i -E "s/^(session[[:space:]]+optional[[:space:]]+pam_(mkhomedir|umask)\.so.*umask=)[0-7]+/\1$session_umask/" \
  /etc/pam.d/sshd
