# Sourced by the entrypoint: /etc/slurm/slurmdbd.conf is the rendered file (mounted at
# $SLURMDBD_CONF_IN, no password in it) plus StoragePass from $DB_PASSWORD_FILE, owned by
# SlurmUser and readable by it alone, as slurmdbd requires.
conf_in="${SLURMDBD_CONF_IN:-/etc/slurmforge/slurmdbd.conf}"
password_file="${DB_PASSWORD_FILE:-/run/secrets/db-password}"
if [[ -r "$conf_in" ]]; then
  umask 077
  {
    cat "$conf_in"
    if [[ -r "$password_file" ]]; then
      printf 'StoragePass=%s\n' "$(<"$password_file")"
    fi
  } > /etc/slurm/slurmdbd.conf.new
  chown slurm:slurm /etc/slurm/slurmdbd.conf.new
  mv /etc/slurm/slurmdbd.conf.new /etc/slurm/slurmdbd.conf
  umask 022
fi
