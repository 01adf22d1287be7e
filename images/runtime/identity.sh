# shellcheck shell=bash
# Sourced by slurmforge-entrypoint. With the cluster's users in a directory (identity.ldap), start
# this container's SSSD: its settings come from the mounted identity directory, the bind password
# from its secret file, joined here into a file only root reads. Where the container holds the
# jail read-write (login, compute nodes), SSSD's sockets and memory cache are bound into the jail,
# so sessions and job steps resolve users through this same daemon and cache. Without the
# settings (users from the jail's own files) nothing happens.
identity=${SLURMFORGE_IDENTITY_CONF:-/etc/slurmforge/identity}
if [[ -r "$identity/sssd.conf" ]]; then
  jail=${SLURMFORGE_JAIL_ROOT:-/jail}
  password=${LDAP_BIND_PASSWORD_FILE:-/run/secrets/ldap-bind-password}
  # made root's alone before anything is written to it (a redirection opens it with the
  # shell's umask, not the subshell's)
  install -m 0600 /dev/null /etc/sssd/sssd.conf
  (
    cat "$identity/sssd.conf"
    if grep -q '^ldap_default_bind_dn' "$identity/sssd.conf"; then
      printf 'ldap_default_authtok = %s\n' "$(head -n 1 "$password")"
    fi
  ) > /etc/sssd/sssd.conf
  chmod 0600 /etc/sssd/sssd.conf
  # a restarted container keeps its files: the last run's pid file and sockets are stale
  rm -f /run/sssd.pid /var/run/sssd.pid /var/lib/sss/pipes/nss /var/lib/sss/pipes/ssh
  /usr/sbin/sssd -D
  for _ in $(seq 1 100); do
    [[ -S /var/lib/sss/pipes/nss ]] && break
    sleep 0.1
  done
  [[ -S /var/lib/sss/pipes/nss ]] || echo "identity: SSSD did not open its NSS socket (see /var/log/sssd)" >&2
  # (not where no session runs inside the jail: the portal holds it read-write for homes alone)
  sessions=${SLURMFORGE_JAIL_SESSIONS:-1}
  if [[ $sessions != 0 && -d "$jail/var/lib/sss/pipes" && -w "$jail/var/lib/sss" ]]; then
    mount --bind /var/lib/sss/pipes "$jail/var/lib/sss/pipes"
    mount --bind /var/lib/sss/mc "$jail/var/lib/sss/mc"
    mount -o remount,bind,ro "$jail/var/lib/sss/mc"
  fi
  if [[ -d /etc/ssh/sshd_config.d ]]; then
    # keys from the directory, besides ~/.ssh/authorized_keys
    printf '%s\n' 'AuthorizedKeysCommand /usr/bin/sss_ssh_authorizedkeys %u' \
      'AuthorizedKeysCommandUser nobody' > /etc/ssh/sshd_config.d/20-directory-keys.conf
  fi
fi
