# shellcheck shell=bash
# Sourced by slurmforge-entrypoint: create any missing SSH host keys. With a populated jail they
# live in the jail's /etc/ssh, which populate keeps on upgrade, so the login node's identity
# survives redeploys; otherwise they are this container's own.
jail=${SLURMFORGE_JAIL_ROOT:-/jail}
if [[ -r "$jail/.slurmforge/populated" ]]; then
  ssh-keygen -A -f "$jail"
  for key in "$jail"/etc/ssh/ssh_host_*; do
    ln -sf "$key" /etc/ssh/
  done
else
  ssh-keygen -A
fi
