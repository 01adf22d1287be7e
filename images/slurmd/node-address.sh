# shellcheck shell=bash
# Sourced by the entrypoint before slurmd starts. slurmctld resolves a node's NodeAddr once and
# keeps that address for as long as it runs. A node container that comes back under a new address
# (Compose and Kubernetes both hand out a fresh IP on restart, and two restarted nodes may swap
# theirs) would then be sent its job terminations at the old one, and its jobs would stay
# COMPLETING. So each start tells slurmctld the address this container has now (slurmctld only
# forgets what it resolved when the NodeAddr string changes). Nothing to do on the first start,
# when slurmctld is not up yet.
sf_node=$(hostname -s)
sf_args=("$@")
for ((sf_i = 0; sf_i < ${#sf_args[@]} - 1; sf_i++)); do
  [[ ${sf_args[sf_i]} == -N ]] && sf_node=${sf_args[sf_i + 1]}
done
sf_ip=$(getent ahostsv4 "$(hostname)" | awk 'NR == 1 { print $1 }')
if [[ -n $sf_ip ]] && timeout 5 scontrol -o show node "$sf_node" > /dev/null 2>&1; then
  if timeout 5 scontrol update NodeName="$sf_node" NodeAddr="$sf_ip"; then
    echo "slurmforge: slurmctld reaches $sf_node at $sf_ip" >&2
  else
    echo "slurmforge: could not tell slurmctld $sf_node's address ($sf_ip)" >&2
  fi
fi
unset sf_node sf_args sf_i sf_ip
