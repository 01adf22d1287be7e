# shellcheck shell=bash
# Sourced by the entrypoint before slurmd starts. slurmstepd sets its own oom_score_adj to -1000,
# so that a job past its memory loses its tasks (which it sets to 0), not the slurmstepd that
# reports it; lowering it takes CAP_SYS_RESOURCE, which a container rarely has. A Kubernetes pod
# that is not of Guaranteed QoS starts its processes at up to 1000, so slurmstepd would stay
# there, above its tasks, and be the one the kernel kills (its job then never ends). Where this
# container starts above 0, slurmstepd takes 0 instead (its own tasks' value, which needs no
# capability), and the kernel picks the larger process: the task.
if (($(< /proc/self/oom_score_adj) > 0)); then
  export SLURMSTEPD_OOM_ADJ=0
fi
