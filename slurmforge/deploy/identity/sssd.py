"""Who the cluster's users are: the jail's own account files (``local``, made with createuser), or
a site's LDAP directory read through SSSD (``ldap``), optionally one the cluster runs itself.

With ``ldap``, every container that needs user names (slurmctld, slurmdbd, the compute nodes,
login) runs one SSSD (images/runtime/identity.sh). Its NSS and SSH responders' sockets and its
memory cache are bound into the jail on the nodes and on login, so sessions and job steps resolve
users through the same daemon and cache as the Slurm daemons beside them. The configuration is
rendered here without the bind password; each container adds it from the mounted secret when it
starts, into a file of its own (0600).

The DN and search filter grammars are ldap3's (RFC 4514 and RFC 4515), URIs the standard
library's.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

from ldap3 import NONE, Connection, Server, Tls
from ldap3.core.exceptions import (
    LDAPException,
    LDAPSocketOpenError,
    LDAPSocketReceiveError,
    LDAPStartTLSError,
)
from ldap3.operation.search import parse_filter
from ldap3.utils.dn import parse_dn
from pydantic import AfterValidator, Field, StrictBool, StringConstraints

from slurmforge.deploy.spec.fields import AbsPath, is_file
from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import Model

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec

# The embedded directory's service name and the read-only account SSSD binds as there
EMBEDDED_HOST = "slapd"
EMBEDDED_READER = "cn=sssd"
# Where the containers find the rendered files (roles.IDENTITY_CONF)
SSSD_CONF, SUDOERS, CA_FILE = "sssd.conf", "sudoers", "ca.pem"
SEED_FILE = "seed.ldif"  # the embedded directory's (roles.DIRECTORY_CONF)
# where the containers find the CA (roles.IDENTITY_CONF's path) and the images' own CAs
CA_PATH = f"/etc/slurmforge/identity/{CA_FILE}"
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"
# Of the system's own accounts, none is ever taken from the directory
LOCAL_ONLY = ("root", "slurm", "munge", "mysql", "slurmrestd", "slurm-exporter", "nobody")
PASSWORD_MAX = 1024


def _dn(value: str) -> str:
    try:
        parsed = parse_dn(value)
    except LDAPException as exc:
        raise ValueError(f"expected an LDAP DN such as dc=example,dc=org ({exc})") from None
    if not parsed:
        raise ValueError(f"expected an LDAP DN such as dc=example,dc=org, got {quote(value)}")
    return value


def _filter(value: str) -> str:
    try:
        parse_filter(value, None, True, True, None, False)
    except LDAPException:
        raise ValueError(
            f"expected an LDAP search filter in parentheses, such as (objectClass=posixAccount), "
            f"got {quote(value)}"
        ) from None
    return value


def _uri(value: str) -> str:
    try:
        url = urlsplit(value)
        url.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError as exc:
        raise ValueError(f"expected ldap://HOST[:PORT] or ldaps://HOST[:PORT] ({exc})") from None
    if url.scheme not in ("ldap", "ldaps") or not url.hostname or url.path not in ("", "/"):
        raise ValueError(
            f"expected ldap://HOST[:PORT] (StartTLS) or ldaps://HOST[:PORT], got {quote(value)}"
        )
    if url.query or url.fragment or url.username:
        raise ValueError(f"expected no user, path, query or fragment, got {quote(value)}")
    return value


DN = Annotated[str, StringConstraints(strict=True, min_length=1), AfterValidator(_dn)]
Filter = Annotated[str, StringConstraints(strict=True), AfterValidator(_filter)]
Uri = Annotated[str, StringConstraints(strict=True), AfterValidator(_uri)]
Attribute = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z][A-Za-z0-9-]*$")]
GroupName = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")]


class LdapSpec(Model):
    """A site's directory, or (``embedded``) the cluster's own slapd seeded from ``seed``."""

    embedded: StrictBool = False
    # the embedded directory's first content: an LDIF file next to the cluster file, loaded into
    # an empty directory; later changes go through LDAP itself (ldapmodify), as with a site's
    seed: Annotated[str, StringConstraints(strict=True, min_length=1)] = "directory.ldif"
    uri: tuple[Uri, ...] = ()  # tried in order (SSSD fails over); the embedded one's is made
    base_dn: DN
    user_base: DN | None = None  # where users are searched (default: base_dn)
    group_base: DN | None = None
    user_filter: Filter = "(objectClass=posixAccount)"
    group_filter: Filter = "(objectClass=posixGroup)"
    # rfc2307: groups list members by name (memberUid); rfc2307bis: by DN (member)
    schema_: Literal["rfc2307", "rfc2307bis"] = Field("rfc2307", alias="schema")
    # None: an anonymous bind. The embedded directory's reader is cn=sssd,<base_dn>.
    bind_dn: DN | None = None
    # a file on the deploying machine holding the bind password (a Secret on Kubernetes);
    # the embedded directory's is made at the first deploy
    bind_password_file: AbsPath | None = None
    # the CA that signed the directory's certificate (default: the images' system CAs)
    ca_file: AbsPath | None = None
    ssh_key_attribute: Attribute = "sshPublicKey"
    # members of these directory groups may sudo in the jail; nobody else may
    sudo_groups: tuple[GroupName, ...] = ()

    @property
    def uris(self) -> tuple[str, ...]:
        return (f"ldap://{EMBEDDED_HOST}",) if self.embedded else self.uri

    @property
    def reader(self) -> str | None:
        return f"{EMBEDDED_READER},{self.base_dn}" if self.embedded else self.bind_dn


class IdentitySpec(Model):
    source: Literal["local", "ldap"] = "local"
    ldap: LdapSpec | None = None


def ldap_of(spec: ClusterSpec) -> LdapSpec | None:
    """The cluster's directory, when its users come from one."""
    identity = spec.identity
    return identity.ldap if identity.source == "ldap" else None


def embedded(spec: ClusterSpec) -> bool:
    ldap = ldap_of(spec)
    return bool(ldap and ldap.embedded)


def check(path: Path, spec: ClusterSpec) -> None:
    """What the schema cannot say: the combinations, and the files each mode reads."""
    identity = spec.identity
    mapped = spec.accounting.accounts_from_groups
    declared = {a.name for a in spec.accounting.accounts}
    for account, group in mapped.items():
        if not spec.accounting.enabled:
            raise ConfigError(
                f"{path}: accounting.accounts_from_groups.{account}: associations live in "
                "slurmdbd; set accounting.enabled: true, or leave this out"
            )
        if identity.source != "ldap":
            raise ConfigError(
                f"{path}: accounting.accounts_from_groups.{account}: groups come from a "
                "directory; set identity.source: ldap (with identity.ldap), or leave this out"
            )
        if account not in declared:
            raise ConfigError(
                f"{path}: accounting.accounts_from_groups.{account}: no account {account!r} in "
                f"accounting.accounts (the group {group!r} maps to it); declare it there"
            )
    if identity.source == "local":
        if identity.ldap is not None:
            raise ConfigError(
                f"{path}: identity.ldap: the cluster's users are local (identity.source: local); "
                "set identity.source: ldap to read them from this directory"
            )
        return
    ldap = identity.ldap
    if ldap is None:
        raise ConfigError(
            f"{path}: identity.ldap: identity.source is ldap but no directory is described; "
            "expected uri, base_dn (and bind_dn, bind_password_file, ca_file), or embedded: true"
        )
    if "default_account" in spec.accounting.model_fields_set:
        raise ConfigError(
            f"{path}: accounting.default_account: only createuser uses it, and with "
            "identity.source: ldap users come from the directory; map groups to accounts with "
            "accounting.accounts_from_groups instead"
        )
    if ldap.embedded:
        for key in ("uri", "bind_dn", "bind_password_file", "ca_file"):
            if key in ldap.model_fields_set:
                raise ConfigError(
                    f"{path}: identity.ldap.{key}: the embedded directory's is made by deploy; "
                    "leave it out, or set embedded: false for a site's directory"
                )
        seed = path.parent / ldap.seed
        if ".." in Path(ldap.seed).parts or not is_file(str(seed)):
            raise ConfigError(
                f"{path}: identity.ldap.seed: expected an LDIF file next to the cluster file (or "
                f"below it), got {quote(ldap.seed)}"
            )
        return
    if not ldap.uri:
        raise ConfigError(
            f"{path}: identity.ldap.uri: expected one or more ldap:// (StartTLS) or ldaps:// URIs "
            "of the site's directory (or embedded: true)"
        )
    if ldap.bind_dn is not None and ldap.bind_password_file is None:
        raise ConfigError(
            f"{path}: identity.ldap.bind_password_file: bind_dn {ldap.bind_dn} needs the file "
            "that holds its password"
        )
    if ldap.bind_password_file is not None:
        if ldap.bind_dn is None:
            raise ConfigError(
                f"{path}: identity.ldap.bind_dn: a bind password needs the DN it belongs to"
            )
        read_password(path, ldap.bind_password_file)
    if ldap.ca_file is not None:
        read_ca(path, ldap.ca_file)


def read_password(path: Path, file: str) -> str:
    """The bind password in ``file``: one line (a trailing newline is not part of it)."""
    where = f"{path}: identity.ldap.bind_password_file"
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {file} ({exc.strerror})") from None
    text = data.decode("utf-8", errors="replace").removesuffix("\n")
    if not text or len(text) > PASSWORD_MAX or re.search(r"[\x00-\x1f\x7f]", text):
        raise ConfigError(
            f"{where}: expected one line of at most {PASSWORD_MAX} printable characters in {file}"
        )
    return text


def read_ca(path: Path, file: str) -> str:
    where = f"{path}: identity.ldap.ca_file"
    try:
        text = Path(file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read {file} ({exc})") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"{where}: expected PEM certificates in {file}")
    return text


def sssd_conf(spec: ClusterSpec) -> str:
    """SSSD's configuration for the cluster's directory, without the bind password (each container
    appends ``ldap_default_authtok`` from its secret: the domain section is last)."""
    ldap = ldap_of(spec)
    assert ldap is not None
    user_base = ldap.user_base or ldap.base_dn
    group_base = ldap.group_base or ldap.base_dn
    lines = [
        "# Generated by slurmforge from the cluster file's identity.ldap.",
        "[sssd]",
        "services = nss, ssh",
        "domains = directory",
        "",
        "[nss]",
        f"filter_users = {', '.join(LOCAL_ONLY)}",
        "filter_groups = root, slurm, munge",
        "",
        "[ssh]",
        "",
        "[domain/directory]",
        "id_provider = ldap",
        "auth_provider = none",  # keys, not passwords: sshd checks them itself
        "access_provider = permit",
        f"ldap_uri = {', '.join(ldap.uris)}",
        f"ldap_search_base = {ldap.base_dn}",
        f"ldap_user_search_base = {user_base}?subtree?{ldap.user_filter}",
        f"ldap_group_search_base = {group_base}?subtree?{ldap.group_filter}",
        f"ldap_schema = {ldap.schema_}",
        f"ldap_user_ssh_public_key = {ldap.ssh_key_attribute}",
        # names as the directory has them: Slurm and sudo compare them as given
        "use_fully_qualified_names = false",
        "case_sensitive = true",
        "enumerate = false",
        # a user seen once keeps working while the directory is away; an unknown one is refused
        "cache_credentials = false",
        "entry_cache_timeout = 600",
        # back online soon after the directory is (SSSD's default waits a minute, then longer)
        "offline_timeout = 5",
        "offline_timeout_max = 30",
        "ldap_network_timeout = 3",
        "ldap_opt_timeout = 5",
    ]
    if ldap.embedded:
        # on the cluster's own network only: the reader's password is the cluster's secret
        lines += ["ldap_id_use_start_tls = false", "ldap_tls_reqcert = never"]
    else:
        starttls = any(u.startswith("ldap://") for u in ldap.uris)
        lines += [
            f"ldap_id_use_start_tls = {'true' if starttls else 'false'}",
            "ldap_tls_reqcert = demand",
            f"ldap_tls_cacert = {CA_PATH if ldap.ca_file else SYSTEM_CA}",
        ]
    if ldap.reader:
        lines += [f"ldap_default_bind_dn = {ldap.reader}", "ldap_default_authtok_type = password"]
    return "\n".join(lines) + "\n"


def sudoers(spec: ClusterSpec) -> str:
    """The jail's sudoers rule for the directory's sudo groups (none: nobody may sudo)."""
    ldap = ldap_of(spec)
    groups = ldap.sudo_groups if ldap else ()
    lines = ["# Generated by slurmforge from identity.ldap.sudo_groups."]
    lines += [f"%{group} ALL=(ALL:ALL) NOPASSWD: ALL" for group in groups]
    return "\n".join(lines) + "\n"


def files(spec: ClusterSpec, path: Path) -> dict[str, str]:
    """The identity configuration directory's files (empty for local users)."""
    ldap = ldap_of(spec)
    if ldap is None:
        return {}
    out = {SSSD_CONF: sssd_conf(spec), SUDOERS: sudoers(spec)}
    if ldap.ca_file:
        out[CA_FILE] = read_ca(path, ldap.ca_file)
    return out


def directory_files(spec: ClusterSpec, path: Path) -> dict[str, str]:
    """The embedded directory's configuration directory: its seed (empty without one)."""
    ldap = ldap_of(spec)
    if ldap is None or not ldap.embedded:
        return {}
    seed = path.parent / ldap.seed
    try:
        return {SEED_FILE: seed.read_text()}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: identity.ldap.seed: cannot read {seed} ({exc})") from None


def digest(spec: ClusterSpec, path: Path) -> str:
    """Of what SSSD is given: a container started with other settings is made again."""
    text = "\0".join(f"{k}={v}" for k, v in sorted(files(spec, path).items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def probe(path: Path, spec: ClusterSpec, timeout: int = 5) -> list[str]:
    """Before a deploy changes anything: bind to each of a site directory's URIs as SSSD will
    (TLS checked against ``ca_file`` or the system CAs, the bind DN and its password). A
    certificate or a bind the directory refuses is a ConfigError; a directory this host cannot
    reach (the nodes may: a Kubernetes cluster's network) is a note, one per URI."""
    ldap = ldap_of(spec)
    if ldap is None or ldap.embedded:
        return []
    password = read_password(path, ldap.bind_password_file) if ldap.bind_password_file else None
    tls = Tls(
        validate=ssl.CERT_REQUIRED,
        version=ssl.PROTOCOL_TLS_CLIENT,
        ca_certs_file=ldap.ca_file,
    )
    trust = ldap.ca_file or "the system CAs"
    notes = []
    for uri in ldap.uris:
        url = urlsplit(uri)
        secure = url.scheme == "ldaps"
        server = Server(
            url.hostname,
            port=url.port or (636 if secure else 389),
            use_ssl=secure,
            tls=tls,
            connect_timeout=timeout,
            get_info=NONE,
        )
        conn = Connection(
            server, user=ldap.bind_dn, password=password, receive_timeout=timeout, read_only=True
        )
        try:
            conn.open()
            if not secure and not conn.start_tls():
                raise LDAPStartTLSError(conn.result.get("description", "refused"))
            if not conn.bind():
                what = conn.result.get("description") or conn.result
                raise ConfigError(
                    f"{path}: identity.ldap.bind_password_file: {uri} refused the bind as "
                    f"{ldap.bind_dn or 'anonymous'} ({what})"
                )
        except (LDAPStartTLSError, LDAPSocketOpenError, LDAPSocketReceiveError) as exc:
            detail = str(exc)
            if "CERTIFICATE_VERIFY_FAILED" in detail or "certificate" in detail.lower():
                raise ConfigError(
                    f"{path}: identity.ldap.ca_file: {uri}'s certificate is not trusted by "
                    f"{trust} ({_brief(detail)})"
                ) from None
            notes.append(
                f"identity.ldap.uri: {uri} does not answer from this host ({_brief(detail)}); "
                "SSSD on the nodes will keep trying it"
            )
        finally:
            with contextlib.suppress(LDAPException, OSError):
                conn.unbind()
    return notes


def _brief(detail: str) -> str:
    found = re.search(r"certificate verify failed: [^)\]'\"]*|\[Errno [^\]]*\][^'\")\]]*", detail)
    return " ".join((found.group(0) if found else detail).split())[:200]
