# Sourced by slurmctld's entrypoint: with accounting, wait (bounded) until slurmdbd accepts
# connections. A first slurmctld without state files cannot start without slurmdbd's TRES list
# ("we have no TRES from it"); later ones spool records while it is away, but wait all the same.
conf="${SLURM_CONF:-/etc/slurm/slurm.conf}"
if grep -qs '^AccountingStorageType=accounting_storage/slurmdbd' "$conf"; then
  dbd_host=$(sed -n 's/^AccountingStorageHost=//p' "$conf")
  dbd_port=$(sed -n 's/^AccountingStoragePort=//p' "$conf")
  for _ in $(seq 1 "${SLURMFORGE_DBD_WAIT:-120}"); do
    if (exec 3<>"/dev/tcp/${dbd_host}/${dbd_port:-6819}") 2>/dev/null; then
      break
    fi
    sleep 1
  done
fi
