"""The web portal's TLS certificate and key: one PEM file holding both (the certificate first,
with its chain, then the private key), which the hub's proxy serves on the published port.

A site gives its own (``portal.tls_pem``); otherwise the first deploy makes a self-signed one,
kept with the cluster's other secrets, and every deploy prints its SHA-256 fingerprint, for users
to check what their browser shows. X.509 is `cryptography`'s: nothing here parses a certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from slurmforge.errors import ConfigError

# names a self-signed certificate is good for: the published port on this host, and the hub's
# service name inside the cluster (Compose and Kubernetes alike)
NAMES = ("localhost", "portal")
ADDRESSES = ("127.0.0.1", "::1")
VALID_DAYS = 825  # what browsers accept of a certificate they are told to trust


def make(now: datetime.datetime | None = None) -> bytes:
    """A fresh self-signed certificate and its key (ECDSA P-256), as one PEM file."""
    now = now or datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slurmforge portal")])
    alt = [x509.DNSName(n) for n in NAMES] + [
        x509.IPAddress(ipaddress.ip_address(a)) for a in ADDRESSES
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM) + pem_key


def check(where: str, data: bytes, now: datetime.datetime | None = None) -> x509.Certificate:
    """The certificate ``data`` serves, once it is found whole: a certificate, a key without a
    passphrase that belongs to it, and now within its validity. ``where``: the file and key the
    error names."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise ConfigError(f"{where}: no PEM certificate in it (expected the certificate and key)")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigError(f"{where}: its private key has a passphrase (the hub has none)") from None
    except ValueError:
        raise ConfigError(
            f"{where}: no PEM private key in it (expected the certificate and key)"
        ) from None
    cert = certs[0]
    raw = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.DER, raw) != cert.public_key(
    ).public_bytes(serialization.Encoding.DER, raw):  # fmt: skip
        raise ConfigError(f"{where}: the private key is not the first certificate's key")
    if now > cert.not_valid_after_utc:
        raise ConfigError(
            f"{where}: the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
    if now < cert.not_valid_before_utc:
        raise ConfigError(
            f"{where}: the certificate is not valid before "
            f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )
    return cert


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the certificate, as browsers show it (colon-separated hex)."""
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()


def checked_file(where: str, path: Path) -> x509.Certificate:
    """``check`` of the file at ``path``, one that cannot be read said so the same way."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    return check(where, data)
