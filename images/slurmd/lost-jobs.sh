# shellcheck shell=bash
# Sourced by the entrypoint before slurmd starts: jobs slurmctld still holds on this node lost
# their processes with the container that ran them (see node-state).
/usr/lib/slurmforge/node-state started "$(hostname -s)" || echo "slurmforge: could not check this node's jobs with slurmctld" >&2
