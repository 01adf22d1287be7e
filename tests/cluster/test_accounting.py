"""Accounting on the default cluster, as a user and an administrator see it: sacct after a job
(state, exit code, elapsed), sacctmgr's associations, records kept through a slurmdbd outage and
through restarts of the database and slurmdbd, and the secrets kept out of every place a
container or a generated file would show them."""

from __future__ import annotations

import re
import socket
import time

import pytest

from tests import external_database
from tests.cluster.deployed import Deployed, deploy, invoke, write_cluster
from tests.cluster.helpers import clean_failure, sacct, sbatch_wait
from tests.ports import free_port

pytestmark = pytest.mark.cluster

USER = "acctuser"


def test_a_users_finished_jobs_are_in_sacct_with_exit_codes(deployed: Deployed) -> None:
    deployed.user(USER)
    good = sbatch_wait(deployed, USER, "hostname; sleep 1")
    bad = sbatch_wait(deployed, USER, "exit 3")
    rows = sacct(deployed, USER, [good, bad])
    assert rows[good][:2] == ["COMPLETED", "0:0"], rows
    assert rows[bad][:2] == ["FAILED", "3:0"], rows
    assert re.fullmatch(r"00:00:0[1-9]", rows[good][2]), rows  # it slept one second


def test_sacctmgr_shows_the_cluster_the_account_and_the_user(deployed: Deployed) -> None:
    out = deployed.user("assocuser")
    assert "account=default" in out or "already exists" in out, out
    clusters = deployed.ok("slurmctld", "sacctmgr -n -P show cluster format=cluster")
    assert deployed.name in clusters.split()
    assoc = deployed.ok("slurmctld", "sacctmgr -n -P show assoc format=cluster,account,user")
    assert f"{deployed.name}|default|assocuser" in assoc.splitlines(), assoc


def test_createuser_refuses_an_account_that_does_not_exist(deployed: Deployed) -> None:
    code, out = deployed.sh(
        "login", "chroot /jail createuser --non-interactive nobodyhere --account noacct"
    )
    assert code == 2 and "no account 'noacct'" in out, out
    code, _ = deployed.sh("login", "chroot /jail getent passwd nobodyhere")
    assert code != 0  # nothing was created


def test_jobs_run_while_slurmdbd_is_down_reach_sacct_after(deployed: Deployed) -> None:
    """slurmctld spools the records of jobs that end while slurmdbd is away; none is lost."""
    deployed.user(USER)
    dbd = deployed.container("slurmdbd")
    dbd.stop()
    try:
        out = deployed.ok(
            "login",
            "for i in $(seq 20); do sbatch --parsable --wrap true; done",
            user=USER,
        )
        jobs = [line.split(";")[0] for line in out.split()]
        assert len(jobs) == 20, out
        deadline = time.monotonic() + 120
        while deployed.ok("slurmctld", f"squeue -h -j {','.join(jobs)} | wc -l") != "0":
            assert time.monotonic() < deadline, "the 20 jobs did not finish"
            time.sleep(2)
    finally:
        dbd.start()
    rows = sacct(deployed, USER, jobs, timeout=120)
    assert sorted(rows) == sorted(jobs) and {r[0] for r in rows.values()} == {"COMPLETED"}


def test_restarting_the_database_and_slurmdbd_loses_no_record(deployed: Deployed) -> None:
    deployed.user(USER)
    before = sbatch_wait(deployed, USER, "true")
    sacct(deployed, USER, [before])
    for service in ("mariadb", "slurmdbd"):
        deployed.container(service).restart()
    after = sbatch_wait(deployed, USER, "true")
    rows = sacct(deployed, USER, [before, after], timeout=120)
    assert rows[before][0] == rows[after][0] == "COMPLETED"


def test_secrets_are_in_no_environment_command_line_or_generated_file(
    deployed: Deployed,
) -> None:
    state = deployed.root / "state" / deployed.name
    password = (state / "db-password").read_bytes()
    jwt_key = (state / "jwt_hs256.key").read_bytes()
    assert len(password) >= 32 and len(jwt_key) >= 32
    for service in ("mariadb", "slurmdbd", "slurmctld", "slurmrestd", "login"):
        container = deployed.container(service)
        env = "\n".join(container.attrs["Config"].get("Env") or [])
        assert password.decode() not in env, service
        args = deployed.ok(service, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
        assert password.decode() not in args, service
    for path in (deployed.root / "out").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert password not in data and jwt_key not in data, path
    mode = deployed.ok("slurmdbd", "stat -c '%a %U' /etc/slurm/slurmdbd.conf")
    assert mode == "600 slurm"
    assert deployed.ok("slurmctld", "stat -c '%a %U' /var/lib/slurm/jwt_hs256.key") == "600 slurm"
    code, _ = deployed.sh("slurmrestd", "test -e /var/lib/slurm/jwt_hs256.key")
    assert code != 0  # slurmrestd passes tokens on; it never holds the key


def test_records_survive_down_and_deploy(deployed: Deployed) -> None:
    """`invoke down` keeps the database volume and its password: the next deploy finds every
    record (only `down --volumes` deletes them)."""
    deployed.user(USER)
    job = sbatch_wait(deployed, USER, "true")
    sacct(deployed, USER, [job])
    down = deployed.invoke("down")
    assert down.returncode == 0, down.stderr
    up = deployed.invoke("deploy")
    assert up.returncode == 0, up.stdout + up.stderr
    assert sacct(deployed, USER, [job])[job][0] == "COMPLETED"


def test_a_deploy_with_another_database_password_is_refused(deployed: Deployed) -> None:
    """The password file replaced (as a lost state directory would): refused before anything
    changes, with the way back; the running cluster is left as it was."""
    secret = deployed.root / "state" / deployed.name / "db-password"
    kept = secret.read_bytes()
    ours = {"label": f"com.docker.compose.project={deployed.name}"}  # (other tiers run beside)
    before = {c.name: c.id for c in deployed.client.containers.list(filters=ours)}
    secret.chmod(0o600)
    secret.write_bytes(b"x" * 43)
    try:
        proc = deployed.invoke("deploy")
    finally:
        secret.write_bytes(kept)
        secret.chmod(0o400)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    first = proc.stderr.splitlines()[0]
    assert "was created with another password" in first and "Traceback" not in proc.stderr
    assert "invoke down --volumes" in proc.stderr  # the hint names the way out, and its cost
    assert {c.name: c.id for c in deployed.client.containers.list(filters=ours)} == before


def test_enforcement_rejects_users_without_an_association(deployed: Deployed) -> None:
    """The default cluster enforces associations (accounting.enforce)."""
    deployed.ok("login", "chroot /jail id stray || chroot /jail useradd --create-home stray")
    code, out = deployed.sh("login", "sbatch --wrap true", user="stray")  # no createuser: no assoc
    assert code != 0
    assert "Invalid account or account/partition combination specified" in out, out
    deployed.user("member")
    sbatch_wait(deployed, "member", "true")  # createuser gave it an association: accepted


def test_a_qos_max_jobs_limit_holds(deployed: Deployed) -> None:
    deployed.user("limited")
    deployed.ok("slurmctld", "sacctmgr -i add qos single MaxJobsPerUser=1")
    deployed.ok("slurmctld", "sacctmgr -i modify user limited set qos=single defaultqos=single")
    out = deployed.ok(
        "login",
        "sbatch --parsable --wrap 'sleep 30'; sbatch --parsable --wrap 'sleep 30'",
        user="limited",
    )
    first, second = (line.split(";")[0] for line in out.split())
    try:
        deadline = time.monotonic() + 60
        while True:
            states = deployed.ok("slurmctld", f"squeue -h -j {first},{second} -o '%i %T %r'")
            rows = {r.split()[0]: r.split()[1:] for r in states.splitlines()}
            if rows.get(first, [""])[0] == "RUNNING":
                break
            assert time.monotonic() < deadline, states
            time.sleep(1)
        assert rows[second] == ["PENDING", "QOSMaxJobsPerUserLimit"], states
    finally:
        deployed.sh("slurmctld", f"scancel {first} {second}")


def _refused(deployed: Deployed, tmp_path, name: str, expected: str, **changes) -> None:
    """A deploy of cluster ``name`` (with ``changes``) exits 2 with ``expected`` on its first
    line, and nothing of it exists afterwards: no container, no volume, no secret."""
    write_cluster(tmp_path, name, free_port(), **changes)
    where = ["--cluster", str(tmp_path / "cluster.yaml"), "--out", str(tmp_path / "out")]
    env = {**deployed.env, "SLURMFORGE_STATE_DIR": str(tmp_path / "state")}
    proc = invoke(env, "deploy", *where)
    clean_failure(proc, expected)
    label = f"com.docker.compose.project={name}"
    assert deployed.client.containers.list(all=True, filters={"label": label}) == []
    assert deployed.client.volumes.list(filters={"label": label}) == []
    assert not (tmp_path / "state").exists()


def test_a_rest_port_in_use_is_refused(deployed: Deployed, tmp_path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        _refused(
            deployed,
            tmp_path,
            "sfrestbusy",
            f"rest.port: 127.0.0.1:{port} is not free",
            rest={"port": port},
        )


def test_an_external_database_that_cannot_be_reached_is_refused(deployed: Deployed, tmp_path):
    secret = tmp_path / "db-password"
    secret.write_text("s3cret-password-for-the-site")
    secret.chmod(0o600)
    secret.chmod(0o600)
    database = {"host": "db.slurmforge.invalid", "password_secret": str(secret)}
    _refused(
        deployed,
        tmp_path / "a",
        "sfnodb",
        "'db.slurmforge.invalid' does not resolve",
        accounting={"database": database},
    )
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    database = {"host": "127.0.0.1", "port": port, "password_secret": str(secret)}
    _refused(
        deployed,
        tmp_path / "b",
        "sfrefused",
        f"127.0.0.1:{port} refuses connections",
        accounting={"database": database},
    )


@pytest.fixture(scope="module")
def site_database(images, client, tmp_path_factory):
    with external_database.run(client, images["mariadb"], tmp_path_factory.mktemp("site")) as db:
        yield db


def test_an_external_database_takes_the_records(site_database, client, tmp_path) -> None:
    """No MariaDB of the cluster's own; slurmdbd stores into the site's, where the job is."""
    external = site_database.spec()
    with deploy(tmp_path, "sfext", client, accounting={"database": external}) as cluster:
        label = f"com.docker.compose.project={cluster.name}"
        services = {
            c.labels["com.docker.compose.service"]
            for c in client.containers.list(filters={"label": label})
        }
        assert "slurmdbd" in services and "mariadb" not in services, services
        cluster.user(USER)
        job = sbatch_wait(cluster, USER, "true")
        assert sacct(cluster, USER, [job])[job][:2] == ["COMPLETED", "0:0"]
        assert job in site_database.jobs(cluster.name)


def test_an_external_database_that_refuses_the_password_is_refused(
    deployed: Deployed, site_database, tmp_path
) -> None:
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-site-password-0123")
    wrong.chmod(0o600)
    database = {**site_database.spec(), "password_secret": str(wrong)}
    where = f"{site_database.host}:{site_database.port}"
    _refused(
        deployed,
        tmp_path / "c",
        "sfbadpass",
        f"accounting.database.password_secret: {where} refuses user 'slurm'",
        accounting={"database": database},
    )
