"""The web portal (portal:): the hub, its secrets, settings and database."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge.deploy.roles.base import CONTROLLER, MUNGE, SLURM_CONF
from slurmforge.deploy.roles.identity import IDENTITY_CONF, LDAP_BIND
from slurmforge.deploy.roles.monitoring import METRICS_TOKEN
from slurmforge.deploy.roles.records import (
    CLUSTER_NET,
    DAEMON,
    MANAGEMENT_NET,
    CertificateSecret,
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


PORTAL = "portal"  # the web portal's hub (JupyterHub)


def _portal(spec: ClusterSpec) -> bool:
    return spec.portal.enabled


# the hub's cookie secret (signs its users' sessions) and the token it and its proxy share
PORTAL_COOKIE = Secret(
    "portal-cookie-secret",
    "portal-cookie-secret",
    "PORTAL_COOKIE_SECRET_FILE",
    "/etc/slurmforge/portal-cookie",
    32,
    False,
    _portal,
)

PORTAL_PROXY = Secret(
    "portal-proxy-token",
    "portal-proxy-token",
    "PORTAL_PROXY_TOKEN_FILE",
    "/etc/slurmforge/portal-proxy",
    32,
    True,
    _portal,
)

# what the portal serves TLS with on its published port: a site's (portal.tls_pem) or one made
PORTAL_TLS = CertificateSecret(
    "portal-tls.pem",
    "portal-tls",
    "PORTAL_TLS_FILE",
    "/etc/slurmforge/portal-tls",
    0,
    False,
    _portal,
)

# the hub's settings, portal.yaml (deploy/portal.py)
PORTAL_CONF = ConfigDir("portal-config", "etc/portal", "/etc/slurmforge/portal", when=_portal)

# the hub's database: who is logged in, and which job runs each user's server
PORTAL_DATA = Data("/var/lib/jupyterhub", "portal", "portal", "state")

PORTAL_DB = "jupyterhub.sqlite"  # in PORTAL_DATA (the db_url of images/portal/slurmforge_portal.py)


def _portal_env(spec: ClusterSpec) -> dict[str, str]:
    # no session runs inside its jail: SSSD's sockets stay its own (images/runtime/identity.sh)
    return {"SLURMFORGE_JAIL_SESSIONS": "0"}


# where notebook servers (jobs on the compute nodes) reach the hub's API
PORTAL_API = Port("hub-api", 8081)

# Ready once the published port serves the hub's pages: its health page fetched there, over the
# TLS a browser uses. JupyterHub starts its proxy first, listens itself after, and adds the
# proxy's route to it last; a page opened before that is the proxy's error (1 to 2 s of each
# start here; CI's portal test, right after a restore, waited in vain for the hub's page). The
# hub logs a health check's success at debug level only. The venv's Python
# (images/portal/Dockerfile.j2): the image has no other HTTP client.
HUB_HEALTH = (
    "/opt/slurmforge/jupyterhub/bin/python",
    "-I",
    "-c",
    "import ssl, urllib.request as r; c = ssl.create_default_context(); c.check_hostname = False; "
    "c.verify_mode = ssl.CERT_NONE; r.urlopen('https://127.0.0.1:8000/hub/health', timeout=5, "
    "context=c)",
)

PORTAL_ROLE = Role(
    PORTAL,
    image=PORTAL,
    ports=(Port("https", 8000, publish="portal.port"), PORTAL_API),
    probe=Probe(command=HUB_HEALTH),
    # the munge key for sbatch, squeue and scancel as each user (batchspawner, through sudo)
    secrets=(MUNGE, LDAP_BIND, PORTAL_COOKIE, PORTAL_PROXY, PORTAL_TLS, METRICS_TOKEN),
    configs=(SLURM_CONF, IDENTITY_CONF, PORTAL_CONF),
    # users and their password hashes as the login node reads them; a directory user's
    # home is made on the first start (pam_mkhomedir), as sshd makes it on the first login
    jail="rw",
    data=PORTAL_DATA,
    # runs as root: PAM checks passwords, sudo submits as the user
    capabilities=(*DAEMON, "AUDIT_WRITE"),
    runs_users=True,
    stable_name=True,  # notebook servers reach its API by name
    after=(CONTROLLER,),
    resources=Resources(("100m", "256Mi"), ("1", "1Gi")),
    scraped=PORTAL_API,  # the hub's own metrics
    metrics_path="/hub/metrics",
    networks=(CLUSTER_NET, MANAGEMENT_NET),  # Prometheus scrapes it there
    when=_portal,
    env=_portal_env,
)
