# shellcheck shell=bash
# Sourced by slurmforge-entrypoint on the login node: the jail's sudo rule for the directory's
# sudo groups (identity.ldap.sudo_groups), written into the shared jail where every node's sudo
# reads it. Without a directory the rule is removed: nobody is given sudo by slurmforge then.
rule=${SLURMFORGE_JAIL_ROOT:-/jail}/etc/sudoers.d/slurmforge-directory
source_rule=${SLURMFORGE_IDENTITY_CONF:-/etc/slurmforge/identity}/sudoers
if [[ -r "$source_rule" && -d "${rule%/*}" ]]; then
  install -m 0440 -o root -g root "$source_rule" "$rule.new"
  mv -f "$rule.new" "$rule"
elif [[ -e "$rule" ]]; then
  rm -f "$rule"
fi
