"""Users from a site's directory on the k8s target: a slapd run by the test outside the cluster
(ldaps, a CA of its own; tests/site_ldap.py) on the lab's host; the bind password reaches SSSD
through a Secret and nowhere else; a user who exists only in the directory logs in to the login
pod's sshd with the key stored there and runs `srun -N2 id` with the same identity on both
nodes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests import site_ldap
from tests.external_database import bridge_address
from tests.k8s.conftest import K8sCluster

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def site(
    images: dict[str, str], client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[site_ldap.SiteDirectory, Path]]:
    """The site's directory with user ada (her key beside it) in group physics-users."""
    root = tmp_path_factory.mktemp("site-ldap")
    key = root / "ada_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = key.with_suffix(".pub").read_text().strip()
    base = site_ldap.BASE
    entries = (
        f"dn: cn=physics-users,{base}\nobjectClass: posixGroup\ncn: physics-users\n"
        "gidNumber: 30000\nmemberUid: ada\n\n"
        f"dn: uid=ada,{base}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        "objectClass: ldapPublicKey\nuid: ada\ncn: ada\nsn: ada\nuidNumber: 31000\n"
        "gidNumber: 30000\nhomeDirectory: /home/ada\nloginShell: /bin/bash\n"
        f"sshPublicKey: {public}\n"
    )
    host = bridge_address(client)  # the lab's pods reach this host there
    with site_ldap.run(client, images["slapd"], root / "slapd", host, entries) as directory:
        yield directory, key


def test_a_directory_user_logs_in_by_key_and_runs_on_both_nodes(
    k8s_cluster: K8sCluster, site: tuple[site_ldap.SiteDirectory, Path]
) -> None:
    directory, key = site
    data = k8s_cluster.data()
    data["identity"] = directory.settings()
    k8s_cluster.write(data)
    proc = k8s_cluster.deploy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kube = k8s_cluster.kube
    # the password is a Secret's, mounted where SSSD runs; no rendered object holds it
    assert kube.run("get", "secret", "ldap-bind-password", "-o", "name")
    rendered = "".join(p.read_text() for p in (k8s_cluster.root / "out").rglob("*.yaml"))
    assert "the-right-one" not in rendered and "the-right-one" not in proc.stdout + proc.stderr
    # ssh from inside the login pod to its own sshd, with ada's key, as from her laptop
    store = "umask 077; cat > /jail/root/ada_key"
    kube.run(
        "exec", "-i", "login-0", "-c", "login", "--", "bash", "-c", store, stdin=key.read_text()
    )
    ssh = (
        "chroot /jail ssh -i /root/ada_key -o BatchMode=yes -o StrictHostKeyChecking=no"
        " -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR ada@127.0.0.1"
    )
    out = kube.sh("login-0", "login", f"{ssh} 'id; pwd; srun -N2 id | sort -u'")
    ident, home, *nodes = out.splitlines()
    assert ident.startswith("uid=31000(ada) gid=30000(physics-users)"), out
    assert home == "/home/ada"
    assert nodes == [ident], out  # both nodes: the same uid and groups as the login node
