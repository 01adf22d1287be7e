#!/bin/bash
# Install the munge key supplied at run time, start munged, run the role's hooks, then exec the command.
set -euo pipefail

key_src="${MUNGE_KEY_FILE:-/run/secrets/munge.key}"
if [[ -r "$key_src" ]]; then
  install -o munge -g munge -m 0400 "$key_src" /etc/munge/munge.key
fi
if [[ -s /etc/munge/munge.key && "${SLURMFORGE_MUNGED:-1}" == 1 ]]; then
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged
fi
for hook in /etc/slurmforge/entrypoint.d/*.sh; do
  if [[ -r "$hook" ]]; then
    # shellcheck source=/dev/null
    source "$hook"
  fi
done
exec "$@"
