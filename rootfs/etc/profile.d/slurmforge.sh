# slurmforge: login shell defaults inside the jail.
export SQUEUE_FORMAT="%.10i %.9P %.20j %.8u %.2t %.10M %.6D %R"
export SINFO_FORMAT="%.10P %.5a %.10l %.6D %.6t %N"
if [ -n "${BASH_VERSION:-}" ] && [ -n "${PS1:-}" ]; then
  PS1='\u@\h(jail):\w\$ '
fi
# The host GPU driver's tools (projected read-only by GPU nodes) and the CUDA user space.
for dir in /usr/local/cuda/bin /usr/local/nvidia/bin; do
  case ":$PATH:" in *":$dir:"*) ;; *) [ -d "$dir" ] && PATH="$dir:$PATH" ;; esac
done
export PATH
# What a user's session writes is hers alone (or her group's too where the cluster's homes are
# 0750: identity.home_mode); jobs submitted from here inherit the umask. root keeps 022: what an
# administrator installs into the jail is for every user.
if [ "$(id -u)" -ne 0 ]; then
  slurmforge_umask=$(sed -n 's/^umask=//p' /etc/slurm/slurmforge.conf 2> /dev/null)
  case "$slurmforge_umask" in
    0[0-7][0-7][0-7]) umask "$slurmforge_umask" ;;
    *) umask 0077 ;;  # a cluster deployed before slurmforge.conf said it
  esac
  unset slurmforge_umask
fi
