# shellcheck shell=bash
# Sourced by the entrypoint. When the host's driver was mounted in (read-only, at /usr/local/nvidia),
# make it usable here (this container's own ld cache) and inside the shared jail.
# On Kubernetes the node's driver directories arrive read-only under $SLURMFORGE_DRIVER_ROOT.
if [[ -n "${SLURMFORGE_DRIVER_ROOT:-}" ]] && ! compgen -G '/usr/local/nvidia/lib64/*.so.*' > /dev/null; then
  /usr/local/sbin/slurmforge-mount-driver "$SLURMFORGE_DRIVER_ROOT"
fi
if compgen -G '/usr/local/nvidia/lib64/*.so.*' > /dev/null; then
  ldconfig
  if [[ -d /jail/usr/local/nvidia ]]; then
    /usr/local/sbin/slurmforge-project-driver /jail
  fi
else
  echo "slurmforge: no GPU driver mounted at /usr/local/nvidia: starting without GPUs" >&2
fi
