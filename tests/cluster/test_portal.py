"""The web portal, in a real browser (Debian's Chromium through its WebDriver): a directory user
logs in with their directory password, fills the start form and lands in JupyterLab running as
their Slurm job on a compute node inside the jail; its terminal is a shell there, a notebook runs
the jail's Python, the queue view lists the job, and stopping the server ends the job. Another
user cannot open that server, a wrong password is refused, a local user logs in with the password
`passwd` gave them, and an idle server is ended by the culler. Restored from a backup on a host
that lost the cluster, the hub knows its users as it did: a browser logged in before is still.

A test that fails leaves a screenshot and the page's HTML under .cache/portal/ (tests/browser.py's
`browsers`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ready

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
    wait_for,
)
from tests.cluster.conftest import Clusters, Deployed, invoke
from tests.cluster.helpers import sacct

BASE = "dc=lab,dc=example"
PASSWORDS = {"ada": "ada-Secret-1", "bob": "bob-Secret-2", "carol": "carol-Secret-4"}
# dave is in the directory but not in lab-users: no association, so no job
PASSWORDS["dave"] = "dave-Secret-5"
# the directory's Eve is another user than the jail's own eve (createuser): NSS, SSSD, sudo and
# Slurm tell them apart, and so must the hub
PASSWORDS["Eve"] = "Eve-Secret-6"
UIDS = {"Eve": 41100}  # beside the others' 41000 + their place in the sorted names
IDLE = 30  # portal.idle_timeout here: the culler's test waits about this long
START = 45  # portal.start_timeout here: a server is up in about 10 s


def _seed() -> str:
    entries = [
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Lab\ndc: lab",
        f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people",
        f"dn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups",
        f"dn: cn=lab-users,ou=groups,{BASE}\nobjectClass: posixGroup\ncn: lab-users\n"
        "gidNumber: 40000\nmemberUid: ada\nmemberUid: bob\nmemberUid: carol",
    ]
    ordered = sorted(u for u in PASSWORDS if u not in UIDS)
    for user, password in sorted(PASSWORDS.items()):
        uid = UIDS.get(user) or 41000 + ordered.index(user)
        entries.append(
            f"dn: uid={user},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
            f"objectClass: posixAccount\nuid: {user}\ncn: {user}\nsn: {user}\n"
            f"uidNumber: {uid}\ngidNumber: 40000\nhomeDirectory: /home/{user}\n"
            f"loginShell: /bin/bash\nuserPassword: {ssha(password)}"
        )
    return "\n\n".join(entries) + "\n"


@dataclass
class Portal:
    cluster: Deployed
    url: str

    def squeue(self, user: str) -> list[tuple[str, str, str]]:
        """The user's jobs as the login node's squeue shows them: (job, state, node)."""
        out = self.cluster.ok("login", f"squeue -h -u {user} -o '%i %T %N'")
        return [tuple([*line.split(), ""][:3]) for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def portal(clusters: Clusters) -> Portal:
    root = clusters.root("portal")
    (root / "directory.ldif").write_text(_seed())
    cluster = clusters.deploy(
        "sfportal",
        root,
        identity={"source": "ldap", "ldap": {"embedded": True, "base_dn": BASE}},
        accounting={
            "enforce": ["associations"],
            "accounts": [{"name": "lab"}],
            "accounts_from_groups": {"lab": "lab-users"},
        },
        portal={"enabled": True, "idle_timeout": IDLE, "start_timeout": START},
    )
    port = yaml.safe_load(cluster.cluster_file.read_text())["portal"]["port"]
    return Portal(cluster, f"http://127.0.0.1:{port}")


def test_a_directory_user_runs_jupyterlab_as_their_job_in_the_jail(
    portal: Portal, browser: WebDriver
) -> None:
    cluster = portal.cluster
    started = time.monotonic()
    log_in(browser, portal.url, "ada", PASSWORDS["ada"])
    start_server(browser, portal.url, cpus=1)
    jobs = portal.squeue("ada")
    assert len(jobs) == 1 and jobs[0][1] == "RUNNING", jobs
    job, _, node = jobs[0]
    assert node in ("cpu-0", "cpu-1"), jobs
    print(f"portal: Start to JupyterLab in {time.monotonic() - started:.1f} s (job {job})")

    # the terminal: a shell on that node, inside the job, as ada; its output lands in ~
    type_in_terminal(
        browser,
        portal.url,
        "ada",
        "(hostname; id; cat /proc/self/cgroup; cat /etc/slurmforge-jail-release) > ~/from-lab.txt",
    )
    deadline = time.monotonic() + 30
    seen = ""
    while time.monotonic() < deadline and "slurm=" not in seen:
        time.sleep(1)
        _, seen = cluster.sh("login", "cat /home/ada/from-lab.txt")
    lines = seen.splitlines()
    assert lines[0] == node, seen
    assert lines[1] == cluster.ok("login", "id ada"), seen  # the directory's ada, with her groups
    assert lines[1].startswith("uid=41000(ada) gid=40000(lab-users)"), seen
    assert any(f"/job_{job}/" in line for line in lines), seen  # the job's cgroup
    assert lines[-1].startswith("slurm="), seen  # a file the jail alone has

    # a notebook: the jail's Python
    output = run_python(browser, portal.url, "ada", PYTHON_VERSION)
    jail_python = cluster.ok("login", "chroot /jail python3 -c 'import sys; print(sys.version)'")
    assert output == f"python {jail_python.split()[0]}", output

    # the queue view lists the job
    queue_view_lists(browser, portal.url, "ada", job)

    # stopping the server from the hub ends the job
    stop_server(browser, portal.url)
    deadline = time.monotonic() + 60
    while portal.squeue("ada") and time.monotonic() < deadline:
        time.sleep(2)
    assert not portal.squeue("ada")
    rows = sacct(cluster, "ada", [job])
    assert rows[job][0] in ("CANCELLED", "COMPLETED") or rows[job][0].startswith("CANCELLED")


def test_another_user_cannot_open_a_server_and_wrong_passwords_are_refused(
    portal: Portal, browsers: Callable[[], WebDriver]
) -> None:
    ada, bob = browsers(), browsers()
    assert refused(bob, portal.url, "bob", "not-" + PASSWORDS["bob"])
    log_in(ada, portal.url, "ada", PASSWORDS["ada"])
    start_server(ada, portal.url)
    log_in(bob, portal.url, "bob", PASSWORDS["bob"])
    assert forbidden(bob, portal.url, "ada"), f"bob reached {bob.current_url}: {bob.title}"
    stop_server(ada, portal.url)  # ada's own server is still hers
    # five wrong passwords, and then for a while not even the right one gets carol in
    carol = browsers()
    log_in(carol, portal.url, "carol", PASSWORDS["carol"])  # her password is right
    carol.get(f"{portal.url}/hub/logout")
    for _ in range(5):
        assert refused(carol, portal.url, "carol", "guess")
    assert refused(carol, portal.url, "carol", PASSWORDS["carol"])
    said = portal.cluster.container("portal").logs().decode(errors="replace")
    assert "portal: carol: 5 failed logins; refused for now" in said  # not PAM's refusal


def test_a_name_is_the_user_pam_authenticated_whatever_its_case(
    portal: Portal, browser: WebDriver
) -> None:
    """Eve from the directory logs in with her own password and is Eve to the hub, never the
    jail's eve (JupyterHub lower-cases names by default, after PAM accepted the typed one)."""
    portal.cluster.user("eve")
    log_in(browser, portal.url, "Eve", PASSWORDS["Eve"])
    browser.get(f"{portal.url}/hub/home")
    widget = wait_for(browser).until(
        ready.presence_of_element_located((By.CSS_SELECTOR, "#login_widget span"))
    )
    assert widget.text == "Eve", f"the hub took Eve for {widget.text!r}"


def test_an_idle_server_is_ended_and_its_job_with_it(portal: Portal, browser: WebDriver) -> None:
    cluster = portal.cluster
    cluster.user("erin")
    cluster.ok("login", "echo 'erin:erin-Secret-3' | chroot /jail chpasswd")
    log_in(browser, portal.url, "erin", "erin-Secret-3")
    start_server(browser, portal.url)
    (job, state, _), *_ = portal.squeue("erin")
    assert state == "RUNNING"
    browser.get("about:blank")  # nothing keeps the server busy
    deadline = time.monotonic() + IDLE * 4
    while portal.squeue("erin") and time.monotonic() < deadline:
        time.sleep(5)
    assert not portal.squeue("erin"), f"job {job} still runs {IDLE * 4} s after its last use"
    assert sacct(cluster, "erin", [job])[job][0].startswith("CANCELLED")


def test_a_restarted_hub_finds_the_running_server_and_orphans_no_job(
    portal: Portal, browser: WebDriver
) -> None:
    log_in(browser, portal.url, "ada", PASSWORDS["ada"])
    start_server(browser, portal.url)
    (job, _, _), *_ = portal.squeue("ada")
    portal.cluster.container("portal").restart(timeout=30)
    deadline = time.monotonic() + 90
    while True:  # the hub answers again
        try:
            browser.get(f"{portal.url}/user/ada/lab")
            wait_for(browser, 20).until(
                ready.presence_of_element_located((By.ID, "jp-main-dock-panel"))
            )
            break
        except WebDriverException:  # a refused or reset connection while the hub starts, too
            assert time.monotonic() < deadline, f"no JupyterLab after the restart: {browser.title}"
            time.sleep(2)
    assert [j[0] for j in portal.squeue("ada")] == [job]  # the same job, and no other
    stop_server(browser, portal.url)
    deadline = time.monotonic() + 60
    while portal.squeue("ada") and time.monotonic() < deadline:
        time.sleep(2)
    assert not portal.squeue("ada"), "the server's job outlived its stop"


def test_a_server_whose_job_cannot_start_shows_why_and_is_given_up(
    portal: Portal, browser: WebDriver
) -> None:
    cluster = portal.cluster
    blocker = cluster.ok(
        "login",
        "cd /tmp && sbatch --parsable -N2 --exclusive -t 10 -o /dev/null --wrap 'sleep 600'",
        user="ada",
    )
    try:
        cluster.wait_states({"cpu-0": "alloc", "cpu-1": "alloc"}, timeout=60)
        log_in(browser, portal.url, "bob", PASSWORDS["bob"])
        browser.get(f"{portal.url}/hub/spawn")
        wait_for(browser).until(ready.presence_of_element_located((By.ID, "cpus")))
        browser.find_element(By.CSS_SELECTOR, "form [type=submit]").click()
        message = wait_for(browser, 30).until(
            ready.presence_of_element_located((By.ID, "progress-message"))
        )
        wait_for(browser, 30).until(lambda d: "is pending (Resources)" in message.text)
        (job, state, _), *_ = portal.squeue("bob")
        assert state == "PENDING"
        # given up after start_timeout: the hub says so, and the job is cancelled
        started = time.monotonic()
        wait_for(browser, START + 30).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#progress-bar.bg-danger")
        )
        assert time.monotonic() - started > START - 35, "given up before start_timeout"
        assert "fail" in message.text.lower() or "timeout" in message.text.lower(), message.text
        deadline = time.monotonic() + 30
        while portal.squeue("bob") and time.monotonic() < deadline:
            time.sleep(2)
        assert not portal.squeue("bob"), f"job {job} outlived its server's start"
    finally:
        cluster.ok("slurmctld", f"scancel {blocker.splitlines()[-1].split(';')[0]}")


def test_a_user_without_an_association_is_told_why(portal: Portal, browser: WebDriver) -> None:
    log_in(browser, portal.url, "dave", PASSWORDS["dave"])
    browser.get(f"{portal.url}/hub/spawn")
    wait_for(browser).until(ready.presence_of_element_located((By.ID, "cpus")))
    browser.find_element(By.CSS_SELECTOR, "form [type=submit]").click()
    wait_for(browser, 30).until(lambda d: "Slurm refused the job" in d.page_source)
    assert "Invalid account" in browser.page_source, browser.page_source[-2000:]
    assert not portal.squeue("dave")


def test_a_cluster_restored_on_a_new_host_keeps_who_was_logged_in(
    portal: Portal, browser: WebDriver, tmp_path: Path
) -> None:
    """Backed up while ada is logged in, the cluster lost with its volumes and restored: the
    hub's database came back with it, so her browser's session is still valid (a hub with a
    new database sends her to the login page), and she starts a server that runs as her job."""
    cluster = portal.cluster
    log_in(browser, portal.url, "ada", PASSWORDS["ada"])
    browser.get(f"{portal.url}/hub/home")
    wait_for(browser).until(ready.presence_of_element_located((By.ID, "start")))
    proc = invoke(
        cluster.env, "backup", "--cluster", str(cluster.cluster_file), "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "portal.sqlite" in proc.stdout + proc.stderr
    (archive,) = tmp_path.glob("*.tar")
    proc = cluster.invoke("down", "--volumes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = cluster.invoke("restore", str(archive))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    browser.get(f"{portal.url}/hub/home")
    wait_for(browser).until(ready.presence_of_element_located((By.ID, "start")))
    assert "/hub/login" not in browser.current_url, browser.current_url
    start_server(browser, portal.url)
    jobs = portal.squeue("ada")
    assert len(jobs) == 1 and jobs[0][1] == "RUNNING", jobs
    stop_server(browser, portal.url)
