# Sourced by slurmforge-entrypoint: create any missing SSH host keys for this container.
ssh-keygen -A
