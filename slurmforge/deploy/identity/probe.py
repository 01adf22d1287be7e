"""Before a deploy changes anything: whether the site's directory takes SSSD's bind."""

from __future__ import annotations

import contextlib
import re
import ssl
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from slurmforge.deploy.identity.sssd import ldap_of
from slurmforge.deploy.spec.identity import read_password
from slurmforge.errors import ConfigError

if TYPE_CHECKING:
    from slurmforge.deploy.spec.model import ClusterSpec


def probe(path: Path, spec: ClusterSpec, timeout: int = 5) -> list[str]:
    """Before a deploy changes anything: bind to each of a site directory's URIs as SSSD will
    (TLS checked against ``ca_file`` or the system CAs, the bind DN and its password). A
    certificate or a bind the directory refuses is a ConfigError; a directory this host cannot
    reach (the nodes may: a Kubernetes cluster's network) is a note, one per URI."""
    ldap = ldap_of(spec)
    if ldap is None or ldap.embedded:
        return []
    # here, not with the module: every deploy-side command imports it, few bind to a directory
    from ldap3 import NONE, Connection, Server, Tls
    from ldap3.core.exceptions import (
        LDAPException,
        LDAPSocketOpenError,
        LDAPSocketReceiveError,
        LDAPStartTLSError,
    )

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
