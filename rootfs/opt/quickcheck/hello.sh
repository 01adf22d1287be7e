#!/bin/bash
#SBATCH --job-name=quickcheck-hello
#SBATCH --nodes=1
#SBATCH --time=00:05:00
#SBATCH --output=quickcheck-hello-%j.out
# Quick check of the basics: an allocation is granted, the job runs inside the jail, a job step
# runs, and the job's output lands in the submission directory.
#   sbatch /opt/quickcheck/hello.sh     submit it
#   /opt/quickcheck/hello.sh            submit it, wait for it and check its output (exit 0 = pass)
set -euo pipefail

if [[ -z "${SLURM_JOB_ID:-}" ]]; then
  cd "${HOME:?}"
  job=$(sbatch --parsable --wait "$0") || { echo "quickcheck: the job failed" >&2; exit 1; }
  out="quickcheck-hello-${job%%;*}.out"
  cat "$out"
  grep -q '^quickcheck: ok$' "$out" || { echo "quickcheck: FAILED (see $PWD/$out)" >&2; exit 1; }
  exit 0
fi

echo "job $SLURM_JOB_ID on $(hostname) as $(id -un) in $PWD"
if [[ -r /etc/slurmforge-jail-release ]]; then
  echo "jail: $(< /etc/slurmforge-jail-release)"
else
  echo "quickcheck: not inside the jail" >&2
  exit 1
fi
step=$(srun --ntasks=1 hostname)
[[ "$step" == "$(hostname)" ]] || { echo "quickcheck: job step ran on '$step'" >&2; exit 1; }
echo "quickcheck: ok"
