"""Accounting (accounting:, rest:): slurmdbd, the cluster's own database where it has one, and
slurmrestd; the token key and the database password they share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge.deploy.roles.base import CONTROLLER, MUNGE, SLURM_CONF
from slurmforge.deploy.roles.identity import DIRECTORY, IDENTITY_CONF, LDAP_BIND
from slurmforge.deploy.roles.records import (
    CLUSTER_NET,
    DAEMON,
    DATABASE_NET,
    ConfigDir,
    Data,
    Port,
    Probe,
    Resources,
    Role,
    Secret,
)

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


DBD, RESTD, DATABASE = "slurmdbd", "slurmrestd", "mariadb"


def _accounting(spec: ClusterSpec) -> bool:
    return spec.accounting.enabled


# signs and checks tokens (slurmctld, slurmdbd; scontrol token)
JWT = Secret(
    "jwt_hs256.key", "jwt-key", "JWT_KEY_FILE", "/etc/slurmforge/jwt", 64, False, _accounting
)

# an external database's comes from its file (accounting.database.password_secret)
DB_PASSWORD = Secret(
    "db-password", "db-password", "DB_PASSWORD_FILE", "/etc/slurmforge/db", 32, True, _accounting
)

# slurmdbd.conf without its password (the image adds StoragePass from DB_PASSWORD at start)
DBD_CONF = ConfigDir(
    "slurmdbd-config",
    "etc/slurmdbd",
    "/etc/slurmforge/slurmdbd",
    ("SLURMDBD_CONF_IN", "slurmdbd.conf"),
)

# the cluster's own accounting database
DATABASE_DATA = Data("/var/lib/mysql", "accounting", "data", "database")

# the cluster's own database and slurmdbd's user there (images/mariadb/mariadb-init's defaults)
OWN_DB_NAME, OWN_DB_USER = "slurm_acct_db", "slurm"


def own_database(spec: ClusterSpec) -> bool:
    return spec.accounting.enabled and spec.accounting.database is None


DATABASE_ROLE = Role(
    DATABASE,
    image=DATABASE,
    ports=(Port("mysql", 3306),),
    # through the socket: a TCP probe would log an aborted connection each time
    probe=Probe(command=("mariadb-admin", "ping")),
    secrets=(DB_PASSWORD,),
    data=DATABASE_DATA,
    # its first start makes its data directory mysql's, then the server becomes mysql
    capabilities=("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"),
    # the buffer pool (images/mariadb/slurmforge.cnf) grows to 2 GiB
    resources=Resources(("250m", "512Mi"), ("2", "3Gi")),
    grace_seconds=60,  # InnoDB shuts down cleanly
    networks=(DATABASE_NET,),  # slurmdbd alone reaches it (backups use its socket)
    when=own_database,
)


DBD_ROLE = Role(
    DBD,
    image=DBD,
    command=("slurmdbd", "-D"),
    ports=(Port("slurmdbd", 6819),),
    # ready once it listens: slurmdbd writes its pid file before it has reached the
    # database and before it takes requests (src/slurmdbd/slurmdbd.c)
    probe=Probe(listening=6819),
    secrets=(MUNGE, JWT, DB_PASSWORD, LDAP_BIND),
    configs=(DBD_CONF, IDENTITY_CONF),
    jail="ro",  # user names resolve as on the nodes (the jail's accounts)
    # starts as root, writes its config for SlurmUser and becomes it
    capabilities=DAEMON,
    fixed_hostname=True,
    after=(DATABASE, DIRECTORY),
    resources=Resources(("100m", "256Mi"), ("1", "1Gi")),
    # the clients (sacct, sacctmgr: users' too) and the controllers reach it; it reaches
    # the database
    networks=(CLUSTER_NET, DATABASE_NET),
    when=_accounting,
)


RESTD_ROLE = Role(
    RESTD,
    image=RESTD,
    # it holds no key: each request's token is checked by slurmctld and slurmdbd
    ports=(Port("http", 6820, publish="rest.port"),),
    probe=Probe(listening=6820),
    secrets=(MUNGE,),
    configs=(SLURM_CONF,),
    jail="ro",
    capabilities=DAEMON,  # started as its own account (runuser)
    after=(CONTROLLER,),
    when=lambda spec: spec.rest.enabled,
)
