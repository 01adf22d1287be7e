#!/bin/bash
#SBATCH --job-name=quickcheck-enroot
#SBATCH --nodes=1
#SBATCH --time=00:15:00
#SBATCH --output=quickcheck-enroot-%j.out
# Quick check of containers in jobs: enroot imports an image into the shared enroot cache, creates
# a writable root from it and runs a command in it; pyxis does the same through srun.
#   sbatch /opt/quickcheck/enroot.sh [IMAGE]      (IMAGE default: docker://ubuntu:22.04; needs a
#                                                  registry the nodes can reach)
set -euo pipefail

image=${1:-docker://ubuntu:22.04}
fail() { echo "quickcheck: FAILED: $*" >&2; exit 1; }
command -v enroot > /dev/null \
  || fail "enroot is missing (skipped in this build: image label io.slurmforge.skipped)"
work=$(mktemp -d)
trap 'rm -rf "$work"; enroot remove -f "quickcheck-$$" 2> /dev/null || true' EXIT
enroot import -o "$work/image.sqsh" "$image"
enroot create -n "quickcheck-$$" "$work/image.sqsh"
enroot start --rw "quickcheck-$$" sh -c 'touch /written && cat /etc/os-release' | head -2
if srun --help 2>&1 | grep -q -- --container-image; then
  srun -N1 --container-image="${image#docker://}" true || fail "pyxis could not start $image"
  echo "pyxis: ok"
else
  echo "pyxis: not loaded (skipped in this build?)"
fi
echo "quickcheck: ok"
