"""Users from a directory (identity:): the password SSSD binds with, SSSD's configuration, and the
embedded directory (slapd) with its seed and data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmforge.deploy.identity import sssd
from slurmforge.deploy.roles.records import ConfigDir, Data, Port, Probe, Resources, Role, Secret

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


DIRECTORY = "slapd"


def _ldap(spec: ClusterSpec) -> bool:
    return sssd.ldap_of(spec) is not None


def _ldap_bind(spec: ClusterSpec) -> bool:
    ldap = sssd.ldap_of(spec)
    return ldap is not None and ldap.reader is not None


# the password SSSD binds to the directory with: a site's comes from its file
# (identity.ldap.bind_password_file), the embedded directory's reader's is made once
LDAP_BIND = Secret(
    "ldap-bind-password",
    "ldap-bind-password",
    "LDAP_BIND_PASSWORD_FILE",
    "/etc/slurmforge/ldap",
    32,
    True,
    _ldap_bind,
)

# SSSD's configuration (without its password), the directory's CA and the jail's sudo rule
# (identity/sssd.py); the embedded directory's seed
IDENTITY_CONF = ConfigDir("identity-config", "etc/identity", "/etc/slurmforge/identity", when=_ldap)

DIRECTORY_CONF = ConfigDir(
    "directory-config", "etc/slapd", "/etc/slurmforge/slapd", when=sssd.embedded
)

DIRECTORY_DATA = Data("/var/lib/ldap", "directory", "directory", "state")


def _directory_env(spec: ClusterSpec) -> dict[str, str]:
    ldap = sssd.ldap_of(spec)
    return {"SLAPD_BASE_DN": ldap.base_dn} if ldap else {}


DIRECTORY_ROLE = Role(
    DIRECTORY,
    image=DIRECTORY,
    ports=(Port("ldap", 389),),
    probe=Probe(listening=389),
    # the reader SSSD binds as gets this password when the directory is first made
    secrets=(LDAP_BIND,),
    configs=(DIRECTORY_CONF,),
    data=DIRECTORY_DATA,
    # its first start makes its data directory openldap's, then the server becomes openldap
    capabilities=("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"),
    resources=Resources(("100m", "64Mi"), ("1", "512Mi")),
    targets=("local",),
    when=sssd.embedded,
    env=_directory_env,
)
