"""Users from a directory (identity.ldap, with the embedded slapd): people who exist only in LDAP
log in to the login node by SSH with the key stored there, run jobs as themselves on every node
with the same uid and groups, get a home on their first login, and sudo only where a sudo group
says so. While the directory is down, those already seen keep working and new ones are refused;
when it is back, new ones work without a redeploy."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.cluster.conftest import Deployed, deploy

BASE = "dc=physics,dc=example"


@dataclass
class Directory:
    cluster: Deployed
    keys: dict[str, Path]  # user → private key file

    def ssh(self, user: str, command: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
        """``command`` in a login session of ``user``, over SSH with their key, as a user would."""
        port = self.cluster.login_port
        argv = [
            *("ssh", "-i", str(self.keys[user]), "-p", str(port), "-o", "BatchMode=yes"),
            *("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"),
            *("-o", "LogLevel=ERROR", "-o", "ConnectTimeout=20"),
            f"{user}@127.0.0.1",
            command,
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def ok(self, user: str, command: str) -> str:
        proc = self.ssh(user, command)
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
def directory(
    images: dict[str, str], client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Directory]:
    root = tmp_path_factory.mktemp("identity")
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
    with deploy(root, "sfldap", client, identity={"source": "ldap", "ldap": ldap}) as cluster:
        yield Directory(cluster, keys)


def test_a_directory_user_logs_in_with_their_key_and_runs_on_every_node(
    directory: Directory,
) -> None:
    who = directory.ok("ada", "id; pwd; touch ~/written && stat -c '%U %a' ~ ~/written")
    ident, home, owners = who.split("\n", 2)
    assert ident.startswith("uid=31000(ada) gid=30000(physics-users)"), who
    assert home == "/home/ada"
    assert owners.splitlines() == ["ada 700", "ada 644"]
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
