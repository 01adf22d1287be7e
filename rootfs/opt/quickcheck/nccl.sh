#!/bin/bash
#SBATCH --job-name=quickcheck-nccl
#SBATCH --nodes=1
#SBATCH --gpus-per-node=1
#SBATCH --exclusive
#SBATCH --time=00:15:00
#SBATCH --output=quickcheck-nccl-%j.out
# Quick check of the GPU stack on one node, inside the jail: the host driver is visible (read-only)
# and resolvable through the jail's ld cache, CUDA and NCCL load, and all_reduce_perf runs over
# the node's GPUs.
#   sbatch /opt/quickcheck/nccl.sh            (on a GPU partition: add -p NAME)
set -euo pipefail

echo "job ${SLURM_JOB_ID:-?} on $(hostname), GPUs: ${CUDA_VISIBLE_DEVICES:-none}"
fail() { echo "quickcheck: FAILED: $*" >&2; exit 1; }

for lib in libcuda.so.1 libnvidia-ml.so.1 libcudart.so.12 libnccl.so.2; do
  ldconfig -p | grep -q " $lib " || fail "$lib is not in the jail's ld cache"
done
if touch /usr/local/nvidia/lib64/.probe 2> /dev/null; then
  fail "the driver directory is writable"
fi
python3 - << 'PY' || fail "CUDA or NCCL did not load"
import ctypes
v = ctypes.c_int()
ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)); print("CUDA driver API", v.value)
ctypes.CDLL("libcudart.so.12").cudaRuntimeGetVersion(ctypes.byref(v)); print("CUDA runtime", v.value)
ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v)); print("NCCL", v.value)
PY
if command -v nvidia-smi > /dev/null; then nvidia-smi -L; fi
if ! command -v all_reduce_perf > /dev/null; then
  fail "all_reduce_perf is missing (nccl-tests was skipped in this build: image label io.slurmforge.skipped)"
fi
gpus=$(tr ',' '\n' <<< "${CUDA_VISIBLE_DEVICES:-0}" | wc -l)
all_reduce_perf -b 8 -e 256M -f 2 -g "$gpus"
echo "quickcheck: ok"
