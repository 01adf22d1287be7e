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

import hashlib
import re
import shlex
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ready

from tests.browser import (
    PYTHON_VERSION,
    forbidden,
    hub_home,
    log_in,
    queue_view_lists,
    refused,
    run_python,
    said,
    ssha,
    start_server,
    stop_server,
    type_in_terminal,
    wait_for,
)
from tests.cluster.deployed import Clusters, Deployed, invoke
from tests.cluster.helpers import http_status, sacct
from tests.cluster.promql import query, until
from tests.common import load_yaml

BASE = "dc=lab,dc=example"
PASSWORDS = {"ada": "ada-Secret-1", "bob": "bob-Secret-2", "carol": "carol-Secret-4"}
# dave is in the directory but not in lab-users: no association, so no job
PASSWORDS["dave"] = "dave-Secret-5"
# the directory's Eve is another user than the jail's own eve (createuser): NSS, SSSD, sudo and
# Slurm tell them apart, and so must the hub
PASSWORDS["Eve"] = "Eve-Secret-6"
UIDS = {"Eve": 41100}  # beside the others' 41000 + their place in the sorted names
# portal.idle_timeout here: the culler's test waits about this long. Not shorter: the culler ends
# a server whose activity the hub has not heard of for this long, and a loaded CI machine took
# over 30 s both to restart the hub (the server's reports to it were lost meanwhile) and to load
# JupyterLab's page after the start; each time the server was culled under its user
IDLE = 120
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
    port = load_yaml(cluster.cluster_file.read_text())["portal"]["port"]
    return Portal(cluster, f"https://127.0.0.1:{port}")


def test_the_portal_serves_tls_with_the_certificate_the_deploy_names(portal: Portal) -> None:
    """The published port speaks TLS only, with the certificate made at the first deploy; a
    redeploy prints its SHA-256 fingerprint, which is what the browser is shown."""
    proc = portal.cluster.invoke("deploy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = re.search(r"portal: TLS certificate SHA-256 ([0-9A-F:]{95})", proc.stdout + proc.stderr)
    assert said, proc.stdout + proc.stderr
    port = int(portal.url.rsplit(":", 1)[1])
    served = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port)))
    assert hashlib.sha256(served).hexdigest().upper() == said[1].replace(":", "")
    # nothing answers plain HTTP there (the TLS server drops the connection)
    with pytest.raises(OSError):  # URLError, RemoteDisconnected
        urllib.request.urlopen(f"http://127.0.0.1:{port}/hub/login", timeout=20)


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
    # her first screen asks her nothing: JupyterLab asks within seconds of loading whether she
    # wants Jupyter's news, unless the jail's JupyterLab says not to
    time.sleep(10)
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "jupyter news" not in text.lower(), text

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
    # not PAM's refusal
    assert re.search(r"portal: carol from \S+: 5 failed logins; refused for now", said), said


# From the login node: a login through the hub's login form, as a script would try one; prints
# "<name> <logged in> <seconds the answer took>" per attempt (argv: name password ...).
ATTEMPTS = r"""
import http.cookiejar, re, ssl, sys, time, urllib.error, urllib.parse, urllib.request
url = "https://portal:8000/hub/login"
tls = ssl.create_default_context()
tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE  # the portal's own, self-signed
for name, password in zip(sys.argv[1::2], sys.argv[2::2]):
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
        urllib.request.HTTPSHandler(context=tls))
    page = opener.open(url, timeout=60).read().decode()
    xsrf = re.search(r'name="_xsrf" value="([^"]*)"', page)
    form = {"username": name, "password": password, **({"_xsrf": xsrf[1]} if xsrf else {})}
    started = time.monotonic()
    try:
        landed = opener.open(url, urllib.parse.urlencode(form).encode(), timeout=60).geturl()
        ok = "/hub/login" not in landed
    except urllib.error.HTTPError:
        ok = False
    print(name, ok, round(time.monotonic() - started, 2), flush=True)
"""


def _attempts(portal: Portal, *tries: tuple[str, str]) -> list[tuple[str, bool, float]]:
    args = " ".join(shlex.quote(x) for pair in tries for x in pair)
    out = portal.cluster.ok("login", f"chroot /jail python3 -c {shlex.quote(ATTEMPTS)} {args}")
    rows = [line.split() for line in out.splitlines()]
    return [(name, ok == "True", float(seconds)) for name, ok, seconds in rows]


def test_failed_logins_elsewhere_lock_no_one_out_and_every_refusal_takes_as_long(
    portal: Portal, browser: WebDriver
) -> None:
    """Someone on the login node guesses bob's password: after five guesses that address is
    refused for bob even with his right password, in the same time as a wrong one, while bob
    logs in from his own browser; twenty failures from that address, whatever the names, and it
    is refused for everyone."""
    guesses = _attempts(portal, *[("bob", f"guess-{i}") for i in range(6)])
    assert [ok for _, ok, _ in guesses] == [False] * 6, guesses
    log_in(browser, portal.url, "bob", PASSWORDS["bob"])  # not locked out from elsewhere
    browser.get(f"{portal.url}/hub/logout")
    (right,) = _attempts(portal, ("bob", PASSWORDS["bob"]))
    assert right[1] is False, right  # throttled there
    # a throttled answer takes as long as a refused password: it does not tell itself apart
    assert all(seconds >= 2.9 for _, _, seconds in [*guesses, right]), [*guesses, right]
    names = [(f"nobody{i}", "guess") for i in range(13)]  # 7 failures so far, 20 with these
    _attempts(portal, *names)
    (other,) = _attempts(portal, ("carol", PASSWORDS["carol"]))
    assert other[1] is False, other
    said = portal.cluster.container("portal").logs().decode(errors="replace")
    assert re.search(r"portal: \S+ \(any name\): 20 failed logins; refused for now", said)
    assert re.search(r"portal: bob from \S+: 5 failed logins; refused for now", said)


def test_the_hubs_cookies_stay_on_tls_and_its_site_and_a_rest_start_keeps_to_the_form(
    portal: Portal, browser: WebDriver
) -> None:
    """Secure SameSite session cookies; a server started through the hub's REST API with options the
    form does not have (batchspawner would put them into the batch script) is refused."""
    log_in(browser, portal.url, "bob", PASSWORDS["bob"])
    hub_home(browser, portal.url)
    hub_cookies = [c for c in browser.get_cookies() if c["name"].startswith("jupyterhub-")]
    assert hub_cookies, browser.get_cookies()
    assert all(c.get("sameSite") == "Lax" and c.get("secure") for c in hub_cookies), hub_cookies
    status, said = browser.execute_async_script(START_THROUGH_REST, "bob", {"nprocs": "64"})
    assert status >= 400, (status, said)
    assert not portal.squeue("bob")
    logs = portal.cluster.container("portal").logs().decode(errors="replace")
    assert "unknown start options ['nprocs']" in logs + said, said


START_THROUGH_REST = """
const [user, options, done] = arguments;
const xsrf = decodeURIComponent((document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || "");
fetch(`/hub/api/users/${user}/server`, {
  method: "POST",
  headers: {"X-XSRFToken": xsrf, "Content-Type": "application/json"},
  body: JSON.stringify(options),
}).then(r => r.text().then(t => done([r.status, t]))).catch(e => done([0, String(e)]));
"""


def test_the_hubs_metrics_answer_the_clusters_prometheus_alone(portal: Portal) -> None:
    """/hub/metrics names the hub's users: from the login node a user is refused it, while the
    cluster's Prometheus, presenting the metrics token, scrapes it."""
    said = portal.cluster.ok("login", http_status("portal", 8081, "/hub/metrics"), user="ada")
    assert said.split(" ")[1] in ("401", "403"), said  # the hub's refusal, not a closed port
    until(portal.cluster, 'up{job="portal"} == 1', bool, 60)
    assert query(portal.cluster, "jupyterhub_total_users")


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


def test_a_hub_that_lost_slurm_for_a_while_and_restarted_keeps_the_server_and_orphans_no_job(
    portal: Portal, browser: WebDriver
) -> None:
    """The hub's squeue fails for a while (its munged gone: munge refuses, as it does while the
    controller is unreachable or restarting) and the hub is then restarted: the running server
    is still ada's, and its job is the only one she has. A poll that Slurm did not answer is no
    news of the job (batchspawner took most such answers for a job that is gone, dropped the
    server and left its job running)."""
    log_in(browser, portal.url, "ada", PASSWORDS["ada"])
    start_server(browser, portal.url)
    (job, _, _), *_ = portal.squeue("ada")
    portal.cluster.ok("portal", "kill $(cat /run/munge/munged.pid)")
    code, out = portal.cluster.sh("portal", "sleep 25; squeue -h -j " + job)  # 2 polls or more
    assert code != 0, f"the hub's squeue still answered without munged: {out}"
    portal.cluster.container("portal").restart(timeout=30)  # munged is started again
    deadline = time.monotonic() + 90
    while True:  # the hub answers again
        try:
            browser.get(f"{portal.url}/user/ada/lab")
            wait_for(browser, 20).until(
                ready.presence_of_element_located((By.ID, "jp-main-dock-panel"))
            )
            break
        except WebDriverException:  # a refused or reset connection while the hub starts, too
            assert time.monotonic() < deadline, f"no JupyterLab after the restart: {said(browser)}"
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
        deadline = time.monotonic() + 60  # the hub cancels it as it stops the server (scancel)
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


def _login_page_status(url: str) -> int:
    """The HTTP status of the hub's login page, fetched once (the certificate is the test's own)."""
    unchecked = ssl.create_default_context()
    unchecked.check_hostname, unchecked.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"{url}/hub/login", timeout=30, context=unchecked) as page:
            return page.status
    except urllib.error.HTTPError as error:  # the proxy's error while it has no route to the hub
        return error.code


def test_a_cluster_restored_on_a_new_host_keeps_who_was_logged_in(
    portal: Portal, browser: WebDriver, tmp_path: Path
) -> None:
    """Backed up while ada is logged in, the cluster lost with its volumes and restored: the
    hub's database came back with it, so her browser's session is still valid (a hub with a
    new database sends her to the login page), and she starts a server that runs as her job."""
    cluster = portal.cluster
    log_in(browser, portal.url, "ada", PASSWORDS["ada"])
    hub_home(browser, portal.url)
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
    # the restore returns once the hub serves its pages, not just its proxy
    assert _login_page_status(portal.url) == 200
    hub_home(browser, portal.url)
    start_server(browser, portal.url)
    jobs = portal.squeue("ada")
    assert len(jobs) == 1 and jobs[0][1] == "RUNNING", jobs
    stop_server(browser, portal.url)
