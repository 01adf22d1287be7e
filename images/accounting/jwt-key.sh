# Sourced by the entrypoint where tokens are signed or checked (slurmctld, slurmdbd): the HS256
# key supplied at run time becomes SlurmUser's alone (AuthAltParameters=jwt_key=...).
jwt_src="${JWT_KEY_FILE:-/run/secrets/jwt_hs256.key}"
if [[ -r "$jwt_src" ]]; then
  install -o slurm -g slurm -m 0600 "$jwt_src" /var/lib/slurm/jwt_hs256.key
fi
