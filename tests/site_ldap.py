"""A directory a site runs outside the cluster, for the identity tests of both targets: the
project's slapd image as a container of its own (not managed by slurmforge), serving ldaps:// and
StartTLS with a certificate from a CA of its own, published on one address of this host (the
Compose tier's 127.0.0.1, or the docker0 address the k8s lab's pods reach). Beside it: that CA,
another one, its reader's password (cn=sssd) and a wrong one."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker

from tests.ports import free_ports

BASE = "dc=site,dc=test"


@dataclass
class SiteDirectory:
    root: Path
    ldaps: str  # ldaps://HOST:PORT
    ldap: str  # ldap://HOST:PORT (StartTLS)
    container: docker.models.containers.Container
    base: str = BASE

    def settings(self, ca: str = "ca.pem", password: str = "bind") -> dict:
        """``identity`` of a cluster file that reads its users from here."""
        return {
            "source": "ldap",
            "ldap": {
                "uri": [self.ldaps, self.ldap],
                "base_dn": self.base,
                "bind_dn": f"cn=sssd,{self.base}",
                "bind_password_file": str(self.root / password),
                "ca_file": str(self.root / ca),
            },
        }


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificates(root: Path, host: str) -> None:
    """ca.pem (which signed tls/cert.pem, for ``host``) and other-ca.pem (which did not)."""
    (root / "tls").mkdir()
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                 "-subj", f"/CN=slurmforge test {ca}", cwd=root)  # fmt: skip
    _openssl("req", *ec, "-keyout", "tls/key.pem", "-out", "server.csr", "-subj", "/CN=ldap.test",
             cwd=root)  # fmt: skip
    (root / "san.ext").write_text(f"subjectAltName=IP:{host},DNS:ldap.test\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "tls/cert.pem", "-days", "2", "-extfile", "san.ext",
             cwd=root)  # fmt: skip


@contextlib.contextmanager
def run(
    client: docker.DockerClient, image: str, root: Path, host: str, entries: str = ""
) -> Iterator[SiteDirectory]:
    """The directory, seeded with its base and ``entries`` (LDIF), published on ``host``."""
    root.mkdir(parents=True, exist_ok=True)
    _certificates(root, host)
    (root / "bind").write_text("the-right-one\n")
    (root / "bind").chmod(0o600)  # a secret: its owner's alone, or deploy refuses it
    (root / "wrong").write_text("not-it\n")
    (root / "wrong").chmod(0o600)
    base = f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Site\ndc: site\n"
    (root / "seed.ldif").write_text(base + (f"\n{entries}" if entries else ""))
    secure, plain = free_ports(2, host)
    # a network of its own: Docker's default bridge may hold what another tool left there
    network = client.networks.create(f"sfsitedir{secure}", labels={"io.slurmforge.test": "site"})
    container = client.containers.run(
        image,
        detach=True,
        environment={"SLAPD_BASE_DN": BASE},
        volumes={
            str(root / "seed.ldif"): {"bind": "/etc/slurmforge/slapd/seed.ldif", "mode": "ro"},
            str(root / "bind"): {"bind": "/run/secrets/ldap-bind-password", "mode": "ro"},
            str(root / "tls"): {"bind": "/etc/slurmforge/slapd/tls", "mode": "ro"},
        },
        ports={"636/tcp": (host, secure), "389/tcp": (host, plain)},
        labels={"io.slurmforge.test": "site-directory"},
        network=network.name,
    )
    site = SiteDirectory(root, f"ldaps://{host}:{secure}", f"ldap://{host}:{plain}", container)
    try:
        # ready in about 2 s on an idle machine. A fresh CI run, under the load of builds beside
        # three lanes, failed the three tests of this directory at setup (its message was not
        # kept): wait as long as a loaded machine may need, and say why if slapd is gone
        started = time.monotonic()
        ready = ["ldapsearch", "-x", "-H", "ldaps://127.0.0.1", "-b", "", "-s", "base"]
        while container.exec_run(ready, environment={"LDAPTLS_REQCERT": "never"}).exit_code:
            container.reload()
            waited = time.monotonic() - started
            if container.status != "running" or waited >= 180:
                logs = container.logs(tail=40).decode(errors="replace")
                assert container.status == "running", f"slapd {container.status}:\n{logs}"
                raise AssertionError(f"slapd not ready after {waited:.0f} s:\n{logs}")
            time.sleep(0.5)
        yield site
    finally:
        container.remove(force=True)
        network.remove()
