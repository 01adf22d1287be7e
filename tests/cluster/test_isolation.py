"""Two ordinary users on the default cluster, each trying to reach what is the other's or the
cluster's: her home and job output, her jobs and their command lines (squeue, scontrol, sacct, the
REST API), a job without an association, a token that outlives its cap, a uid that a removed user
had, the node's spool through a step's argv[0], her task epilog, the accounting database, the
exporter's series and Prometheus. Each is what DESIGN.md's "Who may reach what" forbids an
ordinary user; root's view is checked beside it, so a test cannot pass by everything being hidden
from everyone."""

from __future__ import annotations

import re
import shlex
import time

import pytest

from tests import rest_client
from tests.cluster.deployed import Deployed
from tests.cluster.helpers import OWN_SSH_KEY, http_status, sacct, sbatch_wait, scrape
from tests.cluster.promql import until

pytestmark = pytest.mark.cluster

ALICE, BOB = "isoalice", "isobob"
MARK = "only-isoalice-may-know-this"


@pytest.fixture(scope="module")
def users(deployed: Deployed) -> Deployed:
    deployed.user(ALICE)
    deployed.user(BOB)
    return deployed


def _token(cluster: Deployed, user: str, lifespan: int = 600) -> tuple[int, str]:
    code, out = cluster.sh("login", f"scontrol token lifespan={lifespan}", user=user)
    match = re.search(r"^SLURM_JWT=(\S+)$", out, re.M)
    return code, match.group(1) if match else out


def test_homes_files_and_job_output_are_their_owners_alone(users: Deployed) -> None:
    home = users.ok("login", f"stat -c %a /jail/home/{ALICE}")
    assert home == "700", home
    users.ok("login", f"echo {MARK} > ~/secret.txt && mkdir -p ~/work", user=ALICE)
    assert users.ok("login", "stat -c %a ~/secret.txt ~/work", user=ALICE).split() == ["600", "700"]
    job = sbatch_wait(users, ALICE, f"echo {MARK}")
    out = f"/home/{ALICE}/slurm-{job}.out"
    assert users.ok("login", f"cat {out}", user=ALICE) == MARK
    # the job wrote its output with the session's umask, which sbatch handed to it
    assert users.ok("login", f"stat -c %a {out}", user=ALICE) == "600"
    for path in (f"/home/{ALICE}/secret.txt", out, f"/home/{ALICE}/work"):
        code, seen = users.sh("login", f"cat {path} || ls {path}", user=BOB)
        assert code != 0 and MARK not in seen, seen
        assert "Permission denied" in seen, seen


def test_a_user_sees_only_her_own_jobs(users: Deployed) -> None:
    submit = f"sbatch --parsable -J {MARK} --wrap 'sleep 60 # {MARK}'"
    job = users.ok("login", submit, user=ALICE)
    job = job.split(";")[0]
    try:
        rest = users.rest_url
        for who, sees in ((ALICE, True), (BOB, False)):
            listed = users.ok("login", "squeue -a -h -o '%i %u'", user=who)
            assert (job in listed) is sees, (who, listed)
            code, shown = users.sh("login", f"scontrol show job {job}", user=who)
            assert (code == 0 and MARK in shown) is sees, (who, shown)
            code, jwt = _token(users, who)
            assert code == 0, jwt
            paths = rest_client.call(f"{rest}/openapi/v3", user=who, jwt=jwt)[1]["paths"]
            path = next(p for p in paths if re.fullmatch(r"/slurm/v[0-9.]+/job/\{job_id\}", p))
            code, body = rest_client.call(rest + path.replace("{job_id}", job), user=who, jwt=jwt)
            jobs = body.get("jobs") or []
            assert bool(jobs) is sees and (MARK not in str(body)) is not sees, (who, code, body)
        # root (the cluster's operator) still sees every job
        assert job in users.ok("slurmctld", "squeue -h -o %i")
    finally:
        users.sh("slurmctld", f"scancel {job}")
    assert job in sacct(users, ALICE, [job])
    # sacct -a of the other user: slurmdbd shows her nothing of it
    code, out = users.sh("login", f"sacct -a -n -P -X -j {job} -o JobID,User,SubmitLine", user=BOB)
    assert job not in out and MARK not in out, out
    # slurmdbd keeps it for its owner (above) and for root
    assert job in users.ok("slurmctld", f"sacct -a -n -P -X -j {job} -o JobID")


def test_a_job_needs_an_association_its_user_has(users: Deployed) -> None:
    for command in ("sbatch -A no_such_account --wrap true", "srun -A no_such_account true"):
        code, out = users.sh("login", command, user=ALICE)
        assert code != 0, out
        assert "Invalid account" in out, out
    # under her own account her jobs run
    sbatch_wait(users, ALICE, "true")


def test_a_token_cannot_outlive_the_cap(users: Deployed) -> None:
    code, out = _token(users, ALICE, lifespan=999999999)
    assert code != 0, out  # would have been valid until 2058
    code, jwt = _token(users, ALICE, lifespan=3600)  # the default cap, one hour
    assert code == 0, jwt
    # another user's token is not hers to have either way
    code, out = users.sh("login", f"scontrol token username={ALICE}", user=BOB)
    assert code != 0, out


def test_a_removed_users_id_is_never_handed_out_again(users: Deployed) -> None:
    made = users.user("isogone")
    gone_uid = re.search(r"uid=(\d+)", made).group(1)
    code, out = users.sh("login", "chroot /jail removeuser isogone")
    assert code == 0, out
    assert users.ok("slurmctld", "sacctmgr -n -P show user isogone format=user") == ""
    assert users.sh("login", "chroot /jail id isogone")[0] != 0
    # her home is kept, still hers by number, and no new user gets that number
    assert users.ok("login", "stat -c %u /jail/home/isogone") == gone_uid
    made = users.user("isonext")
    assert re.search(r"uid=(\d+)", made).group(1) != gone_uid, made
    assert "account=" in made, made  # and the association came with it
    assert "isonext" in users.ok("slurmctld", "sacctmgr -n -P show assoc user=isonext format=user")
    code, out = users.sh("login", "chroot /jail removeuser --remove-home isonext")
    assert code == 0 and "their home" in out, out
    assert users.sh("login", "test -e /jail/home/isonext")[0] != 0


def test_a_user_with_jobs_is_removed_only_with_them(users: Deployed) -> None:
    users.user("isobusy")
    job = users.ok("login", "sbatch --parsable --wrap 'sleep 120'", user="isobusy").split(";")[0]
    code, out = users.sh("login", "chroot /jail removeuser isobusy")
    assert code == 2 and job in out, out
    assert users.ok("login", "chroot /jail id -u isobusy")  # nothing was removed
    code, out = users.sh("login", "chroot /jail removeuser --cancel-jobs --remove-home isobusy")
    assert code == 0, out
    deadline = time.monotonic() + 30
    while job in users.ok("slurmctld", "squeue -h -o %i"):
        assert time.monotonic() < deadline
        time.sleep(1)


def test_a_step_cannot_pick_another_spool_directory(users: Deployed) -> None:
    """argv[0] is the user's: a path through the spool does not expose it."""
    sneaky = "/var/spool/slurmd/../../../bin/ls"
    code, out = users.sh("login", f"srun -N1 {sneaky} -a /var/spool/slurmd", user=ALICE)
    assert code == 0, out
    names = set(out.split()) - {".", ".."}
    # at most this step's own PMIx directory: no hwloc topology, no other job's directory
    assert all(n.startswith("pmix.") for n in names), names
    # a batch job still runs its script from the spool (its own directory alone is there)
    job = sbatch_wait(users, ALICE, "ls -a /var/spool/slurmd > ~/spool.txt")
    names = set(users.ok("login", "cat ~/spool.txt", user=ALICE).split()) - {".", ".."}
    assert f"job{int(job):05d}" in names and all(
        n == f"job{int(job):05d}" or n.startswith("pmix.") for n in names
    ), names


# Run in a step or a session: which processes it can name in /proc, and whether any of them has
# a root from which ".." leads out of the jail (the node container's / has .dockerenv).
PROBE = r"""
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < "$p/cmdline" 2> /dev/null)" in "sleep $1 "*) echo "sees ${p#/proc/}";; esac
  ls -a "$p/root/.." 2> /dev/null | grep -qx .dockerenv && echo "out via ${p#/proc/}"
done
ls -a / | grep -qx .dockerenv && echo "out itself"
echo "jail $(head -c 6 /etc/slurmforge-jail-release)"
"""
HOP = "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR"


def test_a_step_sees_no_process_outside_it_and_no_way_out_of_the_jail(users: Deployed) -> None:
    """The escape of issue 60: with an ssh session of hers on the node (pam_slurm_adopt lets her
    in), a step of her job named the session's process in /proc and followed its root out to the
    node's /. Now a step sees only its own processes, and a session is in the jail as a step is;
    the session still sees the job's processes (py-spy, htop from an ssh into one's node). Her
    task epilog sees no more than a step."""
    users.ok("login", f"{OWN_SSH_KEY}; cat > ~/probe.sh << 'EOF'{PROBE}EOF", user=ALICE)
    job = users.ok("login", "sbatch --parsable -w cpu-1 -t 5 --wrap 'sleep 311'", user=ALICE)
    try:
        deadline = time.monotonic() + 60
        while users.ok("slurmctld", f"squeue -h -j {job} -o %T") != "RUNNING":
            assert time.monotonic() < deadline, f"job {job} did not start"
            time.sleep(1)
        # a session that stays while a step of the job looks around the node
        step = users.ok(
            "login",
            f"{HOP} cpu-1 'exec sleep 312' & sleep 3; "
            f"srun --jobid {job} --overlap -w cpu-1 -N1 -n1 bash ~/probe.sh 312; kill %1",
            user=ALICE,
        )
        assert "jail slurm=" in step, step  # the probe ran, inside the jail
        assert "sees" not in step and "out " not in step, step
        # her task epilog, which slurmstepd starts outside the task, sees as little: it once saw
        # every process of hers on the node, pyxis's helpers on the node's root among them
        users.ok("login", "printf '#!/bin/sh\\nbash ~/probe.sh 311 > ~/epilog.probe\\n' "
                 "> ~/probe-epilog.sh && chmod 0700 ~/probe-epilog.sh", user=ALICE)  # fmt: skip
        epilog = users.ok(
            "login",
            f"rm -f ~/epilog.probe; srun --jobid {job} --overlap -w cpu-1 -N1 -n1"
            " --task-epilog=$HOME/probe-epilog.sh true && cat ~/epilog.probe",
            user=ALICE,
        )
        assert "jail slurm=" in epilog, epilog
        assert "sees" not in epilog and "out " not in epilog, epilog
        # the session: in the jail, with no way out, and the batch script's sleep in sight
        session = users.ok("login", f"{HOP} cpu-1 bash ~/probe.sh 311", user=ALICE)
        assert "jail slurm=" in session and "sees " in session, session
        assert "out " not in session, session
        # the node's root (beside it) sees both, and the node's own / is where it was
        assert "sleep 311" in users.ok("cpu-1", "ps -eo args")
        users.ok("cpu-1", "test -e /.dockerenv")
    finally:
        users.sh("slurmctld", f"scancel {job}")


# Her task epilog says which root it sees and whether the job's /tmp is there, where her task
# left a file in it; so does the task itself, beside it.
WHERE = 'echo "$(stat -c %d:%i /) $(test -e "/tmp/mark-$SLURM_JOB_ID" && echo tmp)"'
# It also leaves a process behind, detached from the step's tasks, which must not outlive the job.
LEFTOVER = "isoalice-epilog-leftover"
EPILOG = f"""#!/bin/sh
{WHERE} > "$HOME/epilog.where"
setsid sh -c 'sleep 600; : {LEFTOVER}' < /dev/null > /dev/null 2>&1 &
"""


def test_a_task_epilog_runs_where_her_task_runs(users: Deployed) -> None:
    """srun --task-epilog runs her script after each task, started by slurmstepd itself rather
    than in the task. It sees the root her task sees (the jail's, not the node container's own)
    and her job's /tmp, as on any Slurm cluster; on ours it ran on the node's root until the
    epilog was given the task's set-up (images/slurm-debs/epilog-in-jail). A process it detaches
    belongs to none of the step's tasks: it ends with the step's PID namespace (and the jail
    plugin's job epilog would kill it when the job ends on the node)."""
    task = f"touch /tmp/mark-$SLURM_JOB_ID; {WHERE} > ~/task.where"
    code, out = users.sh(
        "login",
        f"rm -f ~/epilog.where ~/task.where; printf %s {shlex.quote(EPILOG)} > ~/ep.sh"
        " && chmod 0700 ~/ep.sh"
        f" && srun -w cpu-1 --task-epilog=$HOME/ep.sh sh -c {shlex.quote(task)}"
        " && cat ~/task.where ~/epilog.where",
        user=ALICE,
    )
    lines = out.strip().splitlines()[-2:]  # after srun's own lines
    assert code == 0 and len(lines) == 2, f"exit {code}: {out}"
    task_where, epilog_where = lines
    assert task_where.endswith(" tmp"), out
    assert epilog_where == task_where, f"her task saw {task_where!r}, her epilog {epilog_where!r}"
    # and it is not the node container's root, which root sees from the node
    node_root = users.ok("cpu-1", "stat -c %d:%i /")
    assert not epilog_where.startswith(f"{node_root} "), out
    # what it detached is gone once the job has ended on the node (its epilog runs then)
    left = f"pgrep -u {ALICE} -f {LEFTOVER} || true"
    deadline = time.monotonic() + 60
    while (pids := users.ok("cpu-1", left)) and time.monotonic() < deadline:
        time.sleep(2)
    assert pids == "", users.ok("cpu-1", f"ps -o pid,args -u {ALICE} || true")


def test_a_jobs_files_are_opened_inside_the_jail(users: Deployed) -> None:
    """slurmstepd opens a batch job's --input/--output/--error as the user: a path that names a
    node file (its processes, the jail's mount point, which only the node has) is refused before
    the job's program runs, and nothing of the file reaches the job."""
    users.ok("login", "echo from-her-home > ~/in.txt", user=ALICE)
    job = sbatch_wait(users, ALICE, "cat")  # stdin /dev/null: fine
    assert sacct(users, ALICE, [job])[job][0] == "COMPLETED"
    code, out = users.sh("login", "sbatch --parsable --wait -i ~/in.txt -o ~/in.out --wrap cat; "
                         "cat ~/in.out", user=ALICE)  # fmt: skip
    assert code == 0 and "from-her-home" in out, out
    # (what each would have shown, at most the message naming it: a job whose stdin slurmstepd
    # cannot open at all, /proc/1 now hidden from it, ends before that)
    # a file in the /tmp of the node's ssh sessions, which is not a job's
    users.ok("cpu-1", "echo session-tmp-file > /jail/tmp/iso.txt && chmod 644 /jail/tmp/iso.txt")
    node_files = {
        "/proc/1/cmdline": "slurmd",
        "/jail/tmp/iso.txt": "session-tmp-file",
        "/proc/self/root/etc/slurm/cgroup.conf": "Constrain",
    }
    for node_file, content in node_files.items():
        out = users.ok(
            "login",
            f"sbatch --parsable --wait -w cpu-1 -i {node_file} -o ~/node.out --wrap cat;"
            ' echo "sbatch exited $?"; cat ~/node.out; rm -f ~/node.out',
            user=ALICE,
        )
        assert "sbatch exited 0" not in out and content not in out, out
        if not node_file.startswith("/proc/1/"):
            assert "input file" in out and "is not a file in the jail" in out, out
    # an output file in the node's world-writable /run/lock (the jail has its own): slurmstepd
    # cannot create it there, so the job fails and nothing of hers is left on the node
    code, out = users.sh("login", "sbatch --wait -w cpu-1 -o /run/lock/iso.out --wrap true",
                         user=ALICE)  # fmt: skip
    assert code != 0, out
    assert users.ok("cpu-1", "ls -A /run/lock") == ""


def test_the_accounting_database_is_out_of_users_reach(users: Deployed) -> None:
    """MariaDB answers slurmdbd alone: not the login node, not a job (sacct, which asks
    slurmdbd, still works for her)."""
    probe = "timeout 5 bash -c '</dev/tcp/mariadb/3306' 2> /dev/null && echo open || echo closed"
    assert users.ok("login", probe, user=ALICE) == "closed"
    assert users.ok("login", f"srun -N1 bash -c {shlex.quote(probe)}", user=ALICE) == "closed"
    assert users.ok("slurmdbd", probe) == "open"
    job = sbatch_wait(users, ALICE, "true")
    assert job in sacct(users, ALICE, [job])


def test_the_metrics_and_prometheus_are_out_of_users_reach(users: Deployed) -> None:
    """The exporter's series name users and their jobs: it answers a scrape that presents the
    cluster's metrics token alone, from the login node and from a job as from anywhere, and
    Prometheus is not on the users' network at all. The operator's Prometheus still scrapes it."""
    exporter = http_status("exporter", 9341, "/metrics")
    prometheus = http_status("prometheus", 9090, "/api/v1/query?query=slurm_jobs")
    probes = f"{exporter}; {prometheus}"
    for command in (probes, f"srun -N1 bash -c {shlex.quote(probes)}"):
        said = users.ok("login", command, user=ALICE)
        status, reached = said.split("\n")
        assert status.split(" ", 1)[1] == "401 Unauthorized" and reached == "closed", said
    until(users, 'up{job="slurm"} == 1 and on() slurm_up == 1', bool, 60)
    assert "slurm_up 1.0" in users.ok("exporter", scrape(9341))
