"""Users from a directory (identity.ldap, with the embedded slapd): people who exist only in LDAP
log in to the login node by SSH with the key stored there, run jobs as themselves on every node
with the same uid and groups, get a home on their first login, and sudo only where a sudo group
says so. While the directory is down, those already seen keep working and new ones are refused;
when it is back, new ones work without a redeploy. A site's own directory (a second slapd started
here with ldaps and a CA of its own, not managed by slurmforge) whose certificate or bind is
refused stops a deploy before anything starts."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from slurmforge import config
from slurmforge.deploy import loader
from slurmforge.deploy.identity import probe
from slurmforge.versions import load as load_versions
from tests import site_ldap
from tests.cluster.deployed import Clusters, Deployed, invoke, squashfs_image, write_cluster
from tests.cluster.helpers import HELLO, OWN_SSH_KEY
from tests.common import ROOT, until
from tests.ports import free_port
from tests.site_ldap import SiteDirectory

BASE = "dc=physics,dc=example"


@dataclass
class Directory:
    cluster: Deployed
    keys: dict[str, Path]  # user → private key file
    images: dict[str, str]
    client: docker.DockerClient

    def ssh(
        self, user: str, command: str, stdin: str | None = None, timeout: int = 120
    ) -> subprocess.CompletedProcess[str]:
        """``command`` in a login session of ``user``, over SSH with their key, as a user would."""
        port = self.cluster.login_port
        argv = [
            *("ssh", "-i", str(self.keys[user]), "-p", str(port), "-o", "BatchMode=yes"),
            *("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"),
            *("-o", "LogLevel=ERROR", "-o", "ConnectTimeout=20"),
            f"{user}@127.0.0.1",
            command,
        ]
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )

    def ok(self, user: str, command: str, stdin: str | None = None) -> str:
        proc = self.ssh(user, command, stdin)
        assert proc.returncode == 0, f"{user}: {command!r} exited {proc.returncode}:\n{proc.stderr}"
        return proc.stdout.strip()


def _seed(keys: dict[str, str]) -> str:
    """Users ada (physics), bob (physics, admins) and carol (physics), each with a key; ada's and
    bob's primary group is physics-users."""
    entries = [
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Physics\ndc: physics",
        f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people",
        f"dn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups",
        f"dn: cn=physics-users,ou=groups,{BASE}\nobjectClass: posixGroup\ncn: physics-users\n"
        "gidNumber: 30000\nmemberUid: ada\nmemberUid: bob\nmemberUid: carol",
        f"dn: cn=hpc-admins,ou=groups,{BASE}\nobjectClass: posixGroup\ncn: hpc-admins\n"
        "gidNumber: 30001\nmemberUid: bob",
    ]
    for i, (user, key) in enumerate(sorted(keys.items())):
        entries.append(
            f"dn: uid={user},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
            f"objectClass: posixAccount\nobjectClass: ldapPublicKey\nuid: {user}\ncn: {user}\n"
            f"sn: {user}\nuidNumber: {31000 + i}\ngidNumber: 30000\nhomeDirectory: /home/{user}\n"
            f"loginShell: /bin/bash\nsshPublicKey: {key}"
        )
    return "\n\n".join(entries) + "\n"


@pytest.fixture(scope="module")
def directory(images: dict[str, str], clusters: Clusters) -> Directory:
    root = clusters.root("identity")
    keys: dict[str, Path] = {}
    public: dict[str, str] = {}
    for user in ("ada", "bob", "carol"):
        keys[user] = root / f"{user}_ed25519"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", user, "-f", str(keys[user])],
            check=True,
        )
        public[user] = keys[user].with_suffix(".pub").read_text().strip()
    (root / "directory.ldif").write_text(_seed(public))
    ldap = {"embedded": True, "base_dn": BASE, "sudo_groups": ["hpc-admins"]}
    accounting = {
        "enforce": ["associations"],  # a user without an association cannot submit
        "accounts": [{"name": "physics"}],
        "accounts_from_groups": {"physics": "physics-users"},
    }
    identity = {"source": "ldap", "ldap": ldap}
    cluster = clusters.deploy("sfldap", root, identity=identity, accounting=accounting)
    return Directory(cluster, keys, images, clusters.client)


def test_a_directory_user_logs_in_with_their_key_and_runs_on_every_node(
    directory: Directory,
) -> None:
    who = directory.ok("ada", "id; pwd; touch ~/written && stat -c '%U %a' ~ ~/written")
    ident, home, owners = who.split("\n", 2)
    assert ident.startswith("uid=31000(ada) gid=30000(physics-users)"), who
    assert home == "/home/ada"
    assert owners.splitlines() == ["ada 700", "ada 600"]  # sessions' umask is 077
    nodes = directory.ok("ada", "srun -N2 -l bash -c 'echo $(hostname) $(id)' | sort")
    lines = nodes.splitlines()
    assert len(lines) == 2, nodes
    assert {line.split(None, 2)[1] for line in lines} == {"cpu-0", "cpu-1"}
    assert {line.split(None, 2)[2] for line in lines} == {ident}
    # the node's Slurm daemons see the same user (slurmd started the steps as 31000)
    assert directory.cluster.ok("cpu-0", "id -un 31000") == "ada"


def test_only_a_sudo_group_member_may_sudo(directory: Directory) -> None:
    assert directory.ok("bob", "sudo -n id -u") == "0"
    refused = directory.ssh("ada", "sudo -n id -u")
    assert refused.returncode != 0
    assert "password is required" in refused.stderr or "not in the sudoers" in refused.stderr


def test_with_the_directory_down_known_users_work_and_new_ones_are_refused(
    directory: Directory,
) -> None:
    directory.ok("ada", "srun -N2 true")  # ada is known on login and both nodes
    slapd = directory.cluster.container("slapd")
    slapd.stop(timeout=10)
    try:
        assert directory.ok("ada", "srun -N2 id -un").splitlines() == ["ada", "ada"]
        refused = directory.ssh("carol", "true")
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused
        states = directory.cluster.states()
        assert set(states.values()) == {"idle"}, states
    finally:
        slapd.start()
    deadline = time.monotonic() + 90
    proc = directory.ssh("carol", "srun -N2 id -un")
    while proc.returncode != 0 and time.monotonic() < deadline:
        time.sleep(3)
        proc = directory.ssh("carol", "srun -N2 id -un")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["carol", "carol"]


def test_ssh_to_the_node_of_a_running_job_lands_in_its_cgroup_and_no_other_node(
    directory: Directory,
) -> None:
    directory.ok("ada", OWN_SSH_KEY)  # for the hop
    job = directory.ok("ada", "sbatch --parsable -w cpu-1 -t 5 --wrap 'sleep 300'")
    try:
        deadline = time.monotonic() + 60
        while directory.cluster.ok("slurmctld", f"squeue -h -j {job} -o %T") != "RUNNING":
            assert time.monotonic() < deadline, f"job {job} did not start"
            time.sleep(1)
        hop = "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
        out = directory.ok(
            "ada",
            f"{hop} cpu-1 'hostname; id -un; cat /etc/slurmforge-jail-release /proc/self/cgroup'",
        )
        host, user, release, *cgroups = out.splitlines()
        assert (host, user) == ("cpu-1", "ada"), out
        assert release.startswith("slurm="), out  # a file only the jail has
        assert any(f"/job_{job}/step_extern" in line for line in cgroups), out
        refused = directory.ssh("ada", f"{hop} cpu-0 true")
        assert refused.returncode != 0
        assert "Access denied by pam_slurm_adopt" in refused.stderr, refused.stderr
    finally:
        directory.cluster.ok("slurmctld", f"scancel {job}")


def _sacct(cluster: Deployed, user: str, job: str) -> str:
    """The job's allocation in sacct (account|state), once slurmdbd has its end."""
    command = f"sacct -n -P -X -u {user} -j {job} -o account,state"
    deadline = time.monotonic() + 60
    out = cluster.ok("slurmctld", command)
    while "COMPLETED" not in out and time.monotonic() < deadline:
        time.sleep(2)
        out = cluster.ok("slurmctld", command)
    return out


def test_mpi_a_container_and_accounting_as_a_directory_user(directory: Directory) -> None:
    directory.ok("ada", "cat > hello.c", stdin=HELLO)
    out = directory.ok("ada", "mpicc -o hello hello.c && srun -N2 -n2 ./hello | sort")
    assert out.splitlines() == ["rank 0 of 2 on cpu-0 sum 1", "rank 1 of 2 on cpu-1 sum 1"]
    image = squashfs_image(directory.cluster, directory.images, directory.client, "ada", "ldapctr")
    cmd = "sh -c '. /etc/os-release; echo $(hostname) $ID $(id -un)'"
    out = directory.ok("ada", f"srun -N2 --container-image={image} {cmd} | grep -v ^pyxis | sort")
    assert out.splitlines() == ["cpu-0 ldapctr ada", "cpu-1 ldapctr ada"]
    job = directory.ok("ada", "sbatch --parsable --wait -N2 --wrap 'srun true'")
    # the account comes from ada's group (accounts_from_groups), with no createuser and no -A
    assert _sacct(directory.cluster, "ada", job) == "physics|COMPLETED"


def test_a_host_lost_after_users_were_added_over_ldap_comes_back_from_the_archive_alone(
    directory: Directory, tmp_path: Path
) -> None:
    """dora is added over LDAP after the first deploy (as a site adds people). The
    cluster is backed up, the host "lost" (containers, volumes, secrets, the cluster file and
    its seed), and `invoke restore` given the archive alone brings it back with dora in it."""
    cluster = directory.cluster
    key = tmp_path / "dora_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dora", "-f", str(key)],
                   check=True)  # fmt: skip
    dora = (
        f"dn: uid=dora,ou=people,{BASE}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        "objectClass: ldapPublicKey\nuid: dora\ncn: dora\nsn: dora\nuidNumber: 31010\n"
        "gidNumber: 30000\nhomeDirectory: /home/dora\nloginShell: /bin/bash\n"
        f"sshPublicKey: {key.with_suffix('.pub').read_text().strip()}\n\n"
        f"dn: cn=hpc-admins,ou=groups,{BASE}\nchangetype: modify\nadd: memberUid\nmemberUid: dora\n"
    )
    slapd = cluster.container("slapd").id
    subprocess.run(
        ["docker", "exec", "-i", slapd, "ldapmodify", "-a", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///"],
        input=dora, text=True, check=True, capture_output=True,
    )  # fmt: skip
    directory.keys["dora"] = key
    assert directory.ok("dora", "id -un; id -Gn") == "dora\nphysics-users hpc-admins"

    out = tmp_path / "backups"
    proc = invoke(cluster.env, "backup", "--cluster", str(cluster.cluster_file), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("*.tar")
    proc = cluster.invoke("down", "--volumes")
    assert proc.returncode == 0, proc.stderr
    away = tmp_path / "away"
    away.mkdir()
    files = [cluster.cluster_file, cluster.root / "directory.ldif"]
    for file in files:
        file.rename(away / file.name)
    try:
        # no --cluster: the archive's own file, written beside the cluster's secrets
        proc = invoke(cluster.env, "restore", str(path), "--out", str(cluster.root / "out"))
    finally:
        for file in files:  # (the helpers read the login port from it)
            (away / file.name).rename(file)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = Path(cluster.env["SLURMFORGE_STATE_DIR"]) / cluster.name / "cluster"
    assert f"cluster file: {written / cluster.name}.yaml" in proc.stdout
    # dora, her key, her groups: the directory as it was, not as it was seeded
    assert directory.ok("dora", "id -un; id -Gn") == "dora\nphysics-users hpc-admins"
    assert directory.ok("ada", "srun -N2 id -un").split() == ["ada", "ada"]
    directory.keys.pop("dora")


def test_a_user_who_leaves_the_group_loses_the_association_not_the_records(
    directory: Directory,
) -> None:
    """Last: carol is out of physics-users afterwards."""
    job = directory.ok("carol", "sbatch --parsable --wait --wrap true")
    change = (
        f"dn: cn=physics-users,ou=groups,{BASE}\nchangetype: modify\n"
        "delete: memberUid\nmemberUid: carol\n"
    )
    slapd = directory.cluster.container("slapd").id
    subprocess.run(
        ["docker", "exec", "-i", slapd, "ldapmodify", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///"],
        input=change, text=True, check=True, capture_output=True,
    )  # fmt: skip
    proc = directory.cluster.invoke("deploy")
    assert proc.returncode == 0, proc.stderr
    assert "account physics: removed carol" in proc.stderr + proc.stdout
    cluster = directory.cluster
    assoc = "sacctmgr -n -P show assoc format=account where user="
    assert cluster.ok("slurmctld", f"{assoc}carol") == ""
    assert cluster.ok("slurmctld", f"{assoc}ada") == "physics"
    refused = directory.ssh("carol", "srun -N1 true")
    assert refused.returncode != 0
    assert "Invalid account" in refused.stderr, refused.stderr
    # her record stays, under her name and the account she ran it in. (Asked by job, not with
    # -u carol: slurmdbd may hold a job just ended with uid 0 for a while, seen here under load as
    # carol|0|physics|COMPLETED for over 60 s, and a filter by her uid misses it meanwhile.)
    command = f"sacct -n -P -X -a -j {job} -o user,account,state"
    until(
        f"job {job}'s record as carol|physics|COMPLETED",
        lambda: cluster.ok("slurmctld", command) == "carol|physics|COMPLETED",
        timeout=60,
        detail=lambda: cluster.sh("slurmctld", f"{command},uid -D"),
    )


@pytest.fixture(scope="module")
def site_directory(
    images: dict[str, str], client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SiteDirectory]:
    root = tmp_path_factory.mktemp("site-directory")
    with site_ldap.run(client, images["slapd"], root, "127.0.0.1") as site:
        yield site


@pytest.fixture
def versions() -> config.Config:
    return load_versions(ROOT / "versions.yaml")


def test_a_site_directory_is_bound_to_as_sssd_will(
    site_directory: SiteDirectory, versions: config.Config, tmp_path: Path
) -> None:
    path = write_cluster(tmp_path, "sfsite", free_port(), identity=site_directory.settings())
    cluster = loader.load(path, versions)
    assert probe.probe(path, cluster.spec) == []  # ldaps:// and ldap:// with StartTLS
    away = f"ldaps://127.0.0.1:{free_port()}"
    settings = site_directory.settings()
    settings["ldap"]["uri"] = [away]
    path = write_cluster(tmp_path, "sfsite", free_port(), identity=settings)
    (note,) = probe.probe(path, loader.load(path, versions).spec)
    assert note.startswith(f"identity.ldap.uri: {away} does not answer from this host")


@pytest.mark.parametrize(
    ("ca", "password", "expected"),
    [
        ("other-ca.pem", "bind", "identity.ldap.ca_file: ldaps://127.0.0.1:"),
        ("ca.pem", "wrong", "identity.ldap.bind_password_file: ldaps://127.0.0.1:"),
    ],
)
def test_a_wrong_ca_or_password_stops_the_deploy_before_anything_starts(
    site_directory: SiteDirectory,
    client: docker.DockerClient,
    tmp_path: Path,
    ca: str,
    password: str,
    expected: str,
) -> None:
    name = f"sfsite{free_port()}"
    settings = site_directory.settings(ca=ca, password=password)
    path = write_cluster(tmp_path, name, free_port(), identity=settings)
    env = {**os.environ, "SLURMFORGE_STATE_DIR": str(tmp_path / "state"), "SLURMFORGE_DEBUG": ""}
    proc = invoke(env, "deploy", "--cluster", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{path}: {expected}" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    label = f"com.docker.compose.project={name}"
    assert client.containers.list(all=True, filters={"label": label}) == []
    assert not (tmp_path / "out").exists()
    assert "the-right-one" not in proc.stderr + proc.stdout
