# shellcheck shell=bash
# Sourced by slurmforge-entrypoint on the login node. SSH sessions are chrooted into the jail
# (ChrootDirectory); give them the runtime mounts a job step gets from the SPANK plugin: a /proc
# that hides other users' processes, the container's /dev, a read-only /sys, a private /tmp, the
# munge socket, the client Slurm configuration and the container's name resolution. The mounts
# live in this container's mount namespace only; the shared volume is not changed.
jail=${SLURMFORGE_JAIL_ROOT:-/jail}
jail_conf=${SLURMFORGE_JAIL_CONF:-/etc/slurmforge/jail/slurm}
if [[ ! -r "$jail/.slurmforge/populated" ]]; then
  echo "login: $jail is not a populated jail (run: invoke jail-populate)" >&2
  exit 1
fi
# The cluster file's scratch directories (jail.scratch), made inside the jail (so a link in the
# shared volume cannot lead outside it) and open to every user like /tmp. They lie apart from
# each other (the cluster file's check), so no user can have put anything on the way; a link or
# a file in a scratch directory's place is left alone, never followed by chmod.
for dir in ${SLURMFORGE_JAIL_SCRATCH:-}; do
  # shellcheck disable=SC2016 # "$1" is expanded by the shell inside the jail
  chroot "$jail" /bin/sh -c '[ -L "$1" ] || { mkdir -p "$1" && [ -d "$1" ] && [ ! -L "$1" ] &&
    chmod 1777 "$1"; }' scratch "$dir" ||
    echo "login: scratch directory $dir is not a directory in the jail: left as it is" >&2
done
mount -t proc -o nosuid,nodev,noexec,hidepid=invisible proc "$jail/proc"
mount --rbind /dev "$jail/dev"
mount --rbind /sys "$jail/sys"
mount -o remount,bind,ro,nosuid,nodev,noexec "$jail/sys"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$jail/tmp"
mount --bind /run/munge "$jail/run/munge"
if [[ -d "$jail_conf" ]]; then
  mount --bind "$jail_conf" "$jail/etc/slurm"
  mount -o remount,bind,ro "$jail/etc/slurm"
fi
for file in /etc/hosts /etc/hostname /etc/resolv.conf; do
  mount --bind "$file" "$jail$file"
  mount -o remount,bind,ro "$jail$file"
done
