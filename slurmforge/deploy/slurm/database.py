"""Accounting around slurmdbd, for both targets: the database checks made before anything starts
(an external database reached and logged in to, the cluster's own kept with its password), and
the setup made once slurmdbd answers (the cluster registered, the default account there).

Commands run through ``sh`` (a shell in slurmctld, as root: an administrator for slurmdbd), as in
ctl.py.
"""

from __future__ import annotations

import hashlib
import shlex
import socket
import time
from collections.abc import Callable
from pathlib import Path

from slurmforge.deploy import roles
from slurmforge.deploy.slurm import accounts
from slurmforge.deploy.spec.model import Cluster
from slurmforge.deploy.spec.services import DatabaseSpec
from slurmforge.errors import ConfigError, DeployError

Sh = Callable[[str], tuple[int, str]]
MARKER = ".slurmforge-password.sha256"  # in the database volume (images/mariadb/mariadb-init)


def runs_own_database(cluster: Cluster) -> bool:
    """True when the cluster runs its own database (whose password the target checks); an
    external one is checked here (check_external) and False returned, as with no accounting."""
    accounting = cluster.spec.accounting
    if accounting.enabled and accounting.database is not None:
        check_external(cluster.path, accounting.database)
    return accounting.enabled and accounting.database is None


def check_external(path: Path, db: DatabaseSpec) -> None:
    """An external database slurmdbd can use, as far as this machine can tell: its host
    resolves, its port answers, and it logs slurmdbd's user in."""
    check_reachable(path, db)
    check_login(path, db)


def check_reachable(path: Path, db: DatabaseSpec, timeout: float = 5.0) -> None:
    """An external database's host resolves and accepts connections on its port."""
    where = f"{path}: accounting.database.host"
    try:
        infos = socket.getaddrinfo(db.host, db.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(
            f"{where}: {db.host!r} does not resolve ({exc.strerror})",
            hint="name a host this machine and the cluster can resolve, or leave out "
            "accounting.database to run the cluster's own MariaDB",
        ) from None
    errors = []
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(address)
                return
            except OSError as exc:
                errors.append(exc.strerror or type(exc).__name__)
    why = errors[0] if errors else "no address"
    raise ConfigError(
        f"{where}: {db.host}:{db.port} refuses connections ({why})",
        hint="check that the database runs and listens there (accounting.database.port)",
    )


def check_login(path: Path, db: DatabaseSpec, timeout: float = 10.0) -> None:
    """An external database takes slurmdbd's user and the password in its file: the MySQL
    handshake slurmdbd will make (PyMySQL), so a wrong password is refused here instead of
    leaving slurmdbd restarting. Run after check_reachable."""
    import pymysql

    # as the slurmdbd image reads the file: trailing newlines are not part of the password
    password = Path(db.password_secret).read_text().rstrip("\n")
    try:
        pymysql.connect(
            host=db.host,
            port=db.port,
            user=db.user,
            password=password,
            connect_timeout=timeout,
            read_timeout=timeout,
        ).close()
    except pymysql.err.MySQLError as exc:
        code, *rest = exc.args or (0,)
        said = str(rest[0]) if rest else type(exc).__name__
        if code in (1044, 1045, 1698):  # access denied (to the server, or a database)
            raise ConfigError(
                f"{path}: accounting.database.password_secret: {db.host}:{db.port} refuses "
                f"user {db.user!r} with the password in {db.password_secret} ({said})",
                hint="put the password of that database user in the file, or grant the user "
                "access from the cluster's hosts",
            ) from None
        raise ConfigError(
            f"{path}: accounting.database.host: {db.host}:{db.port} did not complete a MySQL "
            f"login ({said})",
            hint="check that a MySQL or MariaDB server listens there (accounting.database.port)",
        ) from None


def check_password(cluster: Cluster, volume: Path, password_file: Path) -> None:
    """The cluster's own database volume was made with the password kept for it (its sha256
    is in the volume); refused otherwise, so slurmdbd is never locked out."""
    try:
        recorded = (volume / MARKER).read_text().strip()
    except OSError:  # a fresh volume, or not readable from here (the image checks it too)
        return
    hint = (
        f"the volume {volume.name} keeps the accounting data; put back the password file "
        f"{password_file} it was made with, or delete both with `invoke down --volumes` "
        "(all job records are lost)"
    )
    if not password_file.exists():
        raise ConfigError(
            f"{cluster.path}: accounting: the database of cluster {cluster.name} exists but "
            f"its password file {password_file} is gone",
            hint=hint,
        )
    if hashlib.sha256(password_file.read_bytes()).hexdigest() != recorded:
        raise ConfigError(
            f"{cluster.path}: accounting: the database of cluster {cluster.name} was created "
            f"with another password than the one in {password_file}",
            hint=hint,
        )


def setup(cluster: Cluster, sh: Sh, timeout: float) -> list[str]:
    """Wait until slurmdbd has the cluster (slurmctld registers it), then make the default
    account (createuser puts users under it) and the declared QoS and accounts; returns what
    slurmdbd has beyond what the file declares (accounts.apply)."""
    name = cluster.name
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        code, out = sh(f"sacctmgr -n -P show cluster {shlex.quote(name)} format=cluster")
        if code == 0 and name in out.split():
            break
        time.sleep(1)
    else:
        raise DeployError(
            f"slurmdbd did not register cluster {name} within {timeout:.0f} s: {out[-300:]}"
        )
    account = cluster.spec.accounting.default_account
    ensure_account(sh, account, f"default account of {name}")
    if cluster.spec.metrics.enabled:
        ensure_operator(sh, roles.EXPORTER_USER, account)
    return accounts.apply(cluster, sh)


def ensure_operator(sh: Sh, user: str, account: str) -> None:
    """``user`` a Slurm operator (AdminLevel): it sees every job, user and account that
    PrivateData hides from ordinary users. Added under ``account`` when slurmdbd lacks it."""
    code, out = sh(f"sacctmgr -n -P show user {shlex.quote(user)} format=user,adminlevel")
    if code == 0 and out.strip() == f"{user}|Operator":
        return
    if code == 0 and out.strip().startswith(f"{user}|"):
        command = f"sacctmgr -i modify user {shlex.quote(user)} set AdminLevel=Operator"
    else:
        command = (
            f"sacctmgr -i add user {shlex.quote(user)} Account={shlex.quote(account)} "
            "AdminLevel=Operator"
        )
    code, out = sh(command)
    if code != 0:
        raise DeployError(f"sacctmgr could not make {user} an operator: {out[-300:]}")


def ensure_account(sh: Sh, account: str, description: str) -> None:
    code, out = sh(f"sacctmgr -n -P show account {shlex.quote(account)} format=account")
    if code == 0 and account in out.split():
        return
    code, out = sh(
        f"sacctmgr -i add account {shlex.quote(account)} "
        f"Description={shlex.quote(description)} Organization=slurmforge"
    )
    if code != 0:
        raise DeployError(f"sacctmgr could not add account {account}: {out[-300:]}")
