"""Users from a site's directory on the k8s target: a slapd run by the test outside the cluster
(ldaps, a CA of its own; tests/site_ldap.py) on the lab's host; the bind password reaches SSSD
through a Secret and nowhere else; a user who exists only in the directory logs in to the login
pod's sshd with the key stored there and runs `srun -N2 id` with the same identity on both
nodes, and logs in to the web portal with her directory password, in a real browser, to run
JupyterLab as her job on a node pod (tests/cluster/test_portal.py has the portal's other
cases, on the local target)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests import site_ldap
from tests.browser import (
    PYTHON_VERSION,
    forbidden,
    log_in,
    queue_view_lists,
    refused,
    run_python,
    ssha,
    start_server,
    stop_server,
    type_in_terminal,
)
from tests.external_database import bridge_address
from tests.k8s import lab
from tests.k8s.kube import K8sCluster

pytestmark = pytest.mark.k8s
PASSWORDS = {"ada": "ada-Secret-1", "bob": "bob-Secret-2"}  # their directory passwords
IDLE = 30  # portal.idle_timeout: the culler's check waits about this long


@pytest.fixture(scope="module")
def site(
    images: dict[str, str], client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[site_ldap.SiteDirectory, Path]]:
    """The site's directory with users ada (her key beside it) and bob in group physics-users,
    each with a password."""
    root = tmp_path_factory.mktemp("site-ldap")
    key = root / "ada_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = key.with_suffix(".pub").read_text().strip()
    base = site_ldap.BASE
    entries = (
        f"dn: cn=physics-users,{base}\nobjectClass: posixGroup\ncn: physics-users\n"
        "gidNumber: 30000\nmemberUid: ada\nmemberUid: bob\n\n"
        f"dn: uid=ada,{base}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        "objectClass: ldapPublicKey\nuid: ada\ncn: ada\nsn: ada\nuidNumber: 31000\n"
        "gidNumber: 30000\nhomeDirectory: /home/ada\nloginShell: /bin/bash\n"
        f"sshPublicKey: {public}\nuserPassword: {ssha(PASSWORDS['ada'])}\n\n"
        f"dn: uid=bob,{base}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        "uid: bob\ncn: bob\nsn: bob\nuidNumber: 31001\ngidNumber: 30000\n"
        f"homeDirectory: /home/bob\nloginShell: /bin/bash\nuserPassword: {ssha(PASSWORDS['bob'])}\n"
    )
    host = bridge_address(client)  # the lab's pods reach this host there
    with site_ldap.run(client, images["slapd"], root / "slapd", host, entries) as directory:
        yield directory, key


@pytest.fixture(scope="module")
def deployed(
    k8s_cluster: K8sCluster,
    site: tuple[site_ldap.SiteDirectory, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> subprocess.CompletedProcess[str]:
    """The cluster on the site's directory, with the web portal."""
    directory, _ = site
    data = k8s_cluster.data()
    data["identity"] = directory.settings()
    # ada's and bob's associations (the cluster enforces associations): their group's account
    data["accounting"] = {
        **data.get("accounting", {}),
        "accounts": [{"name": "physics"}],
        "accounts_from_groups": {"physics": "physics-users"},
    }
    data["portal"] = {"enabled": True, "idle_timeout": IDLE}
    k8s_cluster.write(data)
    if k8s_cluster.kube.lab:  # the hub's database: a claim of kubernetes.state's class
        root = tmp_path_factory.mktemp("portal-pv")
        state = (("state", ("ReadWriteOnce",), "1Gi"),)
        manifest, names = lab.volumes(root, f"{data['name']}-portal", data["kubernetes"], state)
        k8s_cluster.kube.run("apply", "-f", str(manifest), namespaced=False)
        k8s_cluster.kube.made += [f"persistentvolume/{n}" for n in names]
    proc = k8s_cluster.deploy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_directory_user_logs_in_by_key_and_runs_on_both_nodes(
    k8s_cluster: K8sCluster,
    site: tuple[site_ldap.SiteDirectory, Path],
    deployed: subprocess.CompletedProcess[str],
) -> None:
    _, key = site
    proc = deployed
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


def test_a_directory_user_runs_jupyterlab_from_the_portal_as_her_job(
    k8s_cluster: K8sCluster,
    deployed: subprocess.CompletedProcess[str],
    browsers: Callable[[], WebDriver],
) -> None:
    kube = k8s_cluster.kube

    def squeue(user: str) -> list[str]:
        return kube.sh("login-0", "login", f"squeue -h -u {user} -o '%i %T %N'").split()

    def until_no_jobs(user: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while squeue(user) and time.monotonic() < deadline:
            time.sleep(2)
        assert not squeue(user), f"{user}'s job still runs {timeout:.0f} s on"

    # the lab has no kube-proxy: the browser goes to the hub's pod, where portal-public sends
    address = kube.pod_ip("portal-0")
    url = f"https://{address}:8000"
    try:  # the browser's proxy connects there first: if it cannot, what the pod was doing
        socket.create_connection((address, 8000), timeout=30).close()
    except OSError as why:
        pod = kube.run("get", "pod", "portal-0", "-o", "wide", check=False)
        log = kube.run("logs", "portal-0", "--all-containers", "--tail", "40", check=False)
        pytest.fail(f"the hub's pod does not answer at {address}:8000 ({why}):\n{pod}\n{log}")
    ada, bob = browsers(), browsers()
    assert refused(ada, url, "ada", "not-" + PASSWORDS["ada"])
    log_in(ada, url, "ada", PASSWORDS["ada"])
    start_server(ada, url)
    jobs = squeue("ada")
    assert len(jobs) == 3 and jobs[1] == "RUNNING", jobs
    job, _, node = jobs
    # the terminal: a shell on that node pod, as ada, in her home on the jail
    write = "(hostname; id; cat /etc/slurmforge-jail-release) > ~/from-lab.txt"
    type_in_terminal(ada, url, "ada", write)
    deadline, seen = time.monotonic() + 30, ""
    while time.monotonic() < deadline and "slurm=" not in seen:
        time.sleep(1)
        seen = kube.sh("login-0", "login", "cat /jail/home/ada/from-lab.txt 2>/dev/null || true")
    lines = seen.splitlines()
    assert lines[0] == node, seen
    assert lines[1].startswith("uid=31000(ada) gid=30000(physics-users)"), seen
    assert lines[-1].startswith("slurm="), seen  # a file the jail alone has
    # a notebook on the jail's Python, and the queue view
    jail_python = kube.sh(
        "login-0", "login", "chroot /jail python3 -c 'import sys; print(sys.version)'"
    )
    assert run_python(ada, url, "ada", PYTHON_VERSION) == f"python {jail_python.split()[0]}"
    queue_view_lists(ada, url, "ada", job)
    # bob may not open it
    log_in(bob, url, "bob", PASSWORDS["bob"])
    assert forbidden(bob, url, "ada"), f"bob reached {bob.current_url}: {bob.title}"
    # stopping the server ends the job
    stop_server(ada, url)
    until_no_jobs("ada", 60)
    state = kube.sh("login-0", "login", f"sacct -n -X -P -j {job} -o State", user="ada")
    assert state.startswith(("CANCELLED", "COMPLETED")), state
    # bob's server, left alone, is ended by the culler, and its job with it
    start_server(bob, url)
    assert squeue("bob")[1] == "RUNNING"
    bob.get("about:blank")
    until_no_jobs("bob", IDLE * 4)
