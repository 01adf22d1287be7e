"""The accounting database image on its own: on an empty volume it makes Slurm's database and
user from the password file it is given (and nothing else on a command line or in its
environment), keeps that password's sha256, and refuses to start on the same volume with
another password instead of letting slurmdbd find out."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import docker
import pytest

from slurmforge.deploy import roles

pytestmark = pytest.mark.image
MARKER = ".slurmforge-password.sha256"  # images/mariadb/mariadb-init


def _wait_ready(container, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container.reload()
        assert container.status == "running", container.logs().decode()[-2000:]
        if container.exec_run(["mariadb-admin", "ping"]).exit_code == 0:
            return
        time.sleep(0.5)
    pytest.fail(f"mariadb did not answer within {timeout} s")


def test_the_database_is_made_once_and_another_password_is_refused(
    client: docker.DockerClient, images: dict[str, str], tmp_path: Path
) -> None:
    volume = client.volumes.create(f"sftest-db-{uuid.uuid4().hex[:6]}")
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text("a" * 20 + "Password-1")
    second.write_text("b" * 20 + "Password-2")
    first.chmod(0o400)
    second.chmod(0o400)

    def start(password: Path, **kw):
        return client.containers.run(
            images["mariadb"],
            detach=True,
            volumes={
                volume.name: {"bind": "/var/lib/mysql", "mode": "rw"},
                str(password): {"bind": "/run/secrets/db-password", "mode": "ro"},
            },
            labels={"io.slurmforge.test": "image"},
            **kw,
        )

    # the first start with exactly the capabilities a Kubernetes pod gives it (no CAP_KILL: the
    # bootstrap server, running as mysql, could not be signalled and kept its locks)
    caps = list(roles.role(roles.DATABASE).capabilities)
    container = start(first, cap_drop=["ALL"], cap_add=caps)
    try:
        _wait_ready(container)
        env = "\n".join(container.attrs["Config"]["Env"] or [])
        assert "Password-1" not in env
        ok = container.exec_run(
            ["mariadb", "-uslurm", "-h127.0.0.1", "-e", "SHOW DATABASES"],
            environment={"MYSQL_PWD": first.read_text()},
        )
        assert ok.exit_code == 0 and b"slurm_acct_db" in ok.output, ok.output
        bad = container.exec_run(
            ["mariadb", "-uslurm", "-h127.0.0.1", "-e", "SELECT 1"],
            environment={"MYSQL_PWD": second.read_text()},
        )
        assert bad.exit_code != 0  # the user has exactly the given password
        marker = container.exec_run(["stat", "-c", "%a %U", "/var/lib/mysql/" + MARKER])
        assert marker.output.decode().strip() == "600 root"
        container.stop(timeout=30)
        container.remove()

        container = start(second)
        deadline = time.monotonic() + 60
        while container.status != "exited" and time.monotonic() < deadline:
            time.sleep(0.5)
            container.reload()
        assert container.attrs["State"]["ExitCode"] == 1
        logs = container.logs().decode()
        assert "is not the one this database was created with" in logs, logs
        assert "Password-2" not in logs
    finally:
        container.remove(force=True)
        volume.remove(force=True)
