"""Where the cluster's users come from (the cluster file's ``identity``): the jail's own account
files (``local``), or an LDAP directory, a site's or one the cluster runs itself (``ldap``); and
what of it the schema cannot say, checked with the files it names.

The DN and search filter grammars are ldap3's (RFC 4514 and RFC 4515), URIs the standard
library's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, StrictBool, StringConstraints

from slurmforge import refs
from slurmforge.deploy.spec.fields import AbsPath, check_private, is_file
from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import Model

# The embedded directory's service name and the read-only account SSSD binds as there
EMBEDDED_HOST = "slapd"
EMBEDDED_READER = "cn=sssd"
PASSWORD_MAX = 1024


# ldap3 is imported where a cluster file's DN or filter is checked, not with the schema: every
# deploy-side command imports this module, and ldap3 was a tenth of that start's CPU
def _dn(value: str) -> str:
    from ldap3.core.exceptions import LDAPException
    from ldap3.utils.dn import parse_dn

    try:
        parsed = parse_dn(value)
    except LDAPException as exc:
        raise ValueError(f"expected an LDAP DN such as dc=example,dc=org ({exc})") from None
    if not parsed:
        raise ValueError(f"expected an LDAP DN such as dc=example,dc=org, got {quote(value)}")
    return value


def _filter(value: str) -> str:
    from ldap3.core.exceptions import LDAPException
    from ldap3.operation.search import parse_filter

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
    try:  # RFC 3986's host: a DNS name (RFC 1123 labels) or an IP literal
        refs.host(url.hostname)
    except ValueError as exc:
        raise ValueError(f"{exc} in {quote(value)}") from None
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
    """Run the cluster's own directory (slapd), seeded from `seed`, instead of using a site's."""
    seed: Annotated[str, StringConstraints(strict=True, min_length=1)] = "directory.ldif"
    """The embedded directory's first content: an LDIF file next to the cluster file, loaded into an
    empty directory; later changes go through LDAP itself (ldapmodify), as with a site's"""
    uri: tuple[Uri, ...] = ()
    """The site directory's URIs (ldap:// with StartTLS, or ldaps://), tried in order (SSSD fails
    over); the embedded one's is made."""
    base_dn: DN
    """The directory's base DN."""
    user_base: DN | None = None
    """Where users are searched (default: base_dn)"""
    group_base: DN | None = None
    """Where groups are searched (default: base_dn)."""
    user_filter: Filter = "(objectClass=posixAccount)"
    """Which entries are users."""
    group_filter: Filter = "(objectClass=posixGroup)"
    """Which entries are groups."""
    schema_: Literal["rfc2307", "rfc2307bis"] = Field("rfc2307", alias="schema")
    """rfc2307: groups list members by name (memberUid); rfc2307bis: by DN (member)"""
    bind_dn: DN | None = None
    """The DN SSSD binds as; unset: an anonymous bind. The embedded directory's reader is
    cn=sssd,<base_dn>."""
    bind_password_file: AbsPath | None = None
    """A file on the deploying machine holding the bind password (a Secret on Kubernetes); the
    embedded directory's is made at the first deploy"""
    ca_file: AbsPath | None = None
    """The CA that signed the directory's certificate (default: the images' system CAs)"""
    ssh_key_attribute: Attribute = "sshPublicKey"
    """The attribute holding a user's SSH public keys (sshd asks SSSD for them)."""
    sudo_groups: tuple[GroupName, ...] = ()
    """Members of these directory groups may sudo in the jail; nobody else may"""

    @property
    def uris(self) -> tuple[str, ...]:
        return (f"ldap://{EMBEDDED_HOST}",) if self.embedded else self.uri

    @property
    def reader(self) -> str | None:
        return f"{EMBEDDED_READER},{self.base_dn}" if self.embedded else self.bind_dn


def _octal(value: object) -> object:
    """YAML reads an unquoted 0750 as the octal number it is: the mode it means."""
    return f"{value:04o}" if isinstance(value, int) and not isinstance(value, bool) else value


# A new home's mode: its owner's alone, or readable by her group too. Sessions, jobs and notebook
# servers get the umask that matches (077, 027), so what they write follows.
# (an editor's YAML 1.2 reads the unquoted 0750 as 750: the schema takes both readings)
HomeMode = Annotated[
    Literal["0700", "0750"],
    BeforeValidator(_octal, json_schema_input_type=Literal["0700", "0750", 0o700, 0o750, 700, 750]),
]
UMASKS = {"0700": "0077", "0750": "0027"}


class IdentitySpec(Model):
    source: Literal["local", "ldap"] = "local"
    """Local: users made with createuser in the jail; ldap: users from a directory, through SSSD."""
    ldap: LdapSpec | None = None
    """The directory, when `source` is ldap."""
    home_mode: HomeMode = "0700"
    """Homes made by createuser and at a directory user's first login; existing homes keep theirs"""

    @property
    def umask(self) -> str:
        return UMASKS[self.home_mode]


def check(path: Path, identity: IdentitySpec) -> None:
    """What the schema cannot say: the combinations, and the files each mode reads."""
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
        check_private(where, file)
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
