"""Containers in jobs, as a user runs them: a squashfs image made from a local Docker image, kept
in the user's home in the jail, started by pyxis and enroot on two nodes with no registry and no
GPU; and the errors a user gets for an image that is missing or corrupt."""

from __future__ import annotations

import shlex

import docker
import pytest

from tests.cluster.deployed import Deployed, squashfs_image

pytestmark = pytest.mark.cluster

USER = "carol"
MARK = "slurmforge-test-container"  # the container's ID= in /etc/os-release; the jail says debian
ROOTS = "/var/lib/slurmforge/enroot"  # node-local container roots, one directory per user


@pytest.fixture(scope="module")
def image(deployed: Deployed, images: dict[str, str], client: docker.DockerClient) -> str:
    """/home/carol/os.sqsh in the jail, with an os-release of its own (squashfs_image)."""
    deployed.user(USER)
    return squashfs_image(deployed, images, client, USER, MARK)


def _srun(cluster: Deployed, args: str) -> tuple[int, str]:
    return cluster.sh("login", f"cd ~ && srun {args}", user=USER)


def test_a_container_image_from_home_runs_on_two_nodes(deployed: Deployed, image: str) -> None:
    uid = deployed.ok("login", "id -u", user=USER)
    cmd = "sh -c '. /etc/os-release; echo \"$(hostname) $ID $(id -u)\"'"
    code, out = _srun(deployed, f"-N2 --container-image={image} {cmd}")
    assert code == 0, out
    assert "error" not in out, out  # nothing failed on the way, cleanup included
    lines = sorted(ln for ln in out.splitlines() if not ln.startswith("pyxis:"))
    assert lines == [f"cpu-0 {MARK} {uid}", f"cpu-1 {MARK} {uid}"]
    for node in ("cpu-0", "cpu-1"):  # the step's container root is gone from the node
        assert deployed.ok(node, f"ls -A {ROOTS}/{uid}/data 2>/dev/null || true") == ""
    code, out = _srun(deployed, "-N1 cat /etc/os-release")  # no container: the jail's own
    assert code == 0 and f"ID={MARK}" not in out and "ID=debian" in out


def test_a_container_step_sees_none_of_the_nodes_processes(deployed: Deployed, image: str) -> None:
    """enroot binds slurmstepd's /proc into the container pyxis starts: that /proc hides every
    process but the user's own (the node's slurmd, munged, sshd, other users' jobs)."""
    cmd = 'sh -c \'cat /proc/[0-9]*/cmdline | tr "\\\\0" " "; echo; id -u\''
    code, out = _srun(deployed, f"-N1 -w cpu-0 --container-image={image} {cmd}")
    assert code == 0, out
    assert "slurmd -D" not in out and "munged" not in out and "sshd" not in out, out
    # root on the node (beside it) sees them
    assert "slurmd -D" in deployed.ok("cpu-0", "ps -eo args")


def test_a_relative_image_path_and_the_users_home_inside(deployed: Deployed, image: str) -> None:
    """pyxis takes ./file relative to the job's directory, and enroot mounts the home in."""
    deployed.ok("login", "echo from-home > ~/note", user=USER)
    code, out = _srun(deployed, "-N1 --container-image=./os.sqsh sh -c 'cat ~/note; pwd'")
    assert code == 0, out
    assert [ln for ln in out.splitlines() if not ln.startswith("pyxis:")] == [
        "from-home",
        f"/home/{USER}",
    ]


def test_a_batch_job_keeps_a_named_container_across_its_steps(
    deployed: Deployed, image: str
) -> None:
    """A job script: one step writes into a named container on each node, the next step finds
    it there; when the job ends the containers are removed from the nodes."""
    uid = deployed.ok("login", "id -u", user=USER)
    script = (
        "#!/bin/bash\n#SBATCH -N2\n"
        f"srun --container-name=work --container-image={image} sh -c 'hostname > /made'\n"
        "srun --container-name=work sh -c 'echo $(cat /made) $(. /etc/os-release; echo $ID)'\n"
    )
    deployed.ok("login", f"cd ~ && printf '%s' {shlex.quote(script)} > ctr.sh", user=USER)
    deployed.ok("login", "cd ~ && sbatch --wait -o ctr.out -e ctr.err ctr.sh", user=USER)
    out = deployed.ok("login", "cat ~/ctr.out", user=USER).splitlines()
    assert sorted(out) == [f"cpu-0 {MARK}", f"cpu-1 {MARK}"], out
    # on stderr only what pyxis and srun say of their work (a step that waited for the one
    # before it to release the job's memory says "srun: Step created for StepId=…")
    err = deployed.ok("login", "cat ~/ctr.err", user=USER).splitlines()
    assert all(ln.startswith(("pyxis: ", "srun: Step created")) for ln in err), err
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"})  # the job's epilog has run
    for node in ("cpu-0", "cpu-1"):
        assert deployed.ok(node, f"ls -A {ROOTS}/{uid}/data 2>/dev/null || true") == ""


def test_enroot_by_hand_as_the_user(deployed: Deployed, image: str) -> None:
    """What pyxis does, done by the user in a job: create a container root from the image, start
    it, remove it (the roots are node-local, so one step does all three)."""
    uid = deployed.ok("login", "id -u", user=USER)
    script = (
        f"enroot create --force --name by-hand {image} >/dev/null 2>&1 && enroot list"
        " && enroot start by-hand sh -c '. /etc/os-release; echo $ID; id -u'"
        " && enroot remove --force by-hand >/dev/null 2>&1 && enroot list | wc -l"
    )
    code, out = _srun(deployed, f"-N1 -w cpu-1 bash -c {shlex.quote(script)}")
    assert code == 0, out
    assert out.splitlines() == ["by-hand", MARK, uid, "0"]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        ("rm -f ~/bad.sqsh", "No such file or directory"),
        ("head -c 65536 /dev/urandom > ~/bad.sqsh", "Invalid image format"),
    ],
    ids=["missing", "corrupt"],
)
def test_a_bad_image_fails_the_step_and_leaves_the_nodes_idle(
    deployed: Deployed, image: str, make: str, expected: str
) -> None:
    deployed.ok("login", make, user=USER)
    code, out = _srun(deployed, "-N2 --container-image=./bad.sqsh true")
    assert code != 0
    assert "pyxis" in out and expected.lower() in out.lower(), out
    deployed.wait_states({"cpu-0": "idle", "cpu-1": "idle"}, timeout=30)
    assert deployed.ok("slurmctld", "sinfo -h -R -o '%n %E'") == ""  # nothing drained
