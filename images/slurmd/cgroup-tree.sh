# shellcheck shell=bash
# Sourced by the entrypoint before slurmd starts, when the cluster constrains jobs with cgroups
# (cgroup.conf says CgroupPlugin=autodetect). slurmd makes a cgroup per job and step under this
# container's own cgroup, and nowhere else:
#  - cgroup v1 (the runtime shares the host's cgroup namespace): each controller is a bind mount
#    of this container's own directory of the host's hierarchy, read-only; it is made writable
#    in this mount namespace only. Nothing above the container's directory is reachable.
#  - cgroup v2 (the runtime gives the container a cgroup namespace of its own): the container's
#    cgroup is the root of /sys/fs/cgroup. A cgroup with processes cannot hand controllers to its
#    children, so this container's processes move to a leaf (init.scope) first, and slurmd
#    (IgnoreSystemd) enables the controllers below the root itself.
# Both need CAP_SYS_ADMIN (the node's built-in base layer grants it) and no AppArmor mount denial.
if grep -qs '^CgroupPlugin=autodetect' /etc/slurm/cgroup.conf; then
  sf_fail() {
    echo "slurmforge: $1; this node cannot constrain jobs (set slurm.cgroups: false in the cluster file on such a host)" >&2
    exit 1
  }
  if [[ $(stat -f -c %T /sys/fs/cgroup) == cgroup2fs ]]; then
    # the whole host tree must never become writable here
    [[ $(< /proc/self/cgroup) == 0::/ ]] || sf_fail "cgroup v2 without a cgroup namespace of its own (cgroupns=host)"
    # this mount's flags only (remount,bind): other mounts of the hierarchy keep theirs
    mount -o remount,bind,rw /sys/fs/cgroup 2> /dev/null || sf_fail "cannot make /sys/fs/cgroup writable"
    # (cgroup files report no size: read them)
    if [[ -n $(< /sys/fs/cgroup/cgroup.procs) ]]; then
      mkdir -p /sys/fs/cgroup/init.scope || sf_fail "cannot make a cgroup under /sys/fs/cgroup"
      while read -r sf_pid; do
        echo "$sf_pid" > /sys/fs/cgroup/init.scope/cgroup.procs 2> /dev/null || true
      done < /sys/fs/cgroup/cgroup.procs
      [[ -z $(< /sys/fs/cgroup/cgroup.procs) ]] || sf_fail "processes left in the container's root cgroup"
    fi
  else
    for sf_ctl in cpuset memory devices freezer cpuacct; do
      sf_dir=/sys/fs/cgroup/$sf_ctl
      [[ -d $sf_dir ]] || sf_fail "no $sf_ctl cgroup controller at $sf_dir"
      mount -o remount,bind,rw "$sf_dir" 2> /dev/null || sf_fail "cannot make $sf_dir writable"
    done
    unset sf_ctl sf_dir
  fi
  unset -f sf_fail
  unset sf_pid
fi
