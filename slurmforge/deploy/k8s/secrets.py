"""The `k8s` target's Secrets (roles.SECRETS, as each cluster uses them) and the accounting
database they guard: made once in the cluster, never written anywhere else, and checked before
anything is applied."""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from pathlib import Path
from typing import IO

from slurmforge.deploy import portal_tls, roles
from slurmforge.deploy.k8s.kubectl import Kubectl, checked
from slurmforge.deploy.roles import DATABASE, Secret
from slurmforge.deploy.slurm import database
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import ConfigError

# the claim check_database looks for: pod mariadb-0's of the volumeClaimTemplate "data"
DATABASE_CLAIM = f"{roles.DATABASE_DATA.claim}-{DATABASE}-0"


class Secrets:
    def __init__(self, cluster: Cluster, kubectl: Kubectl, log: IO[str]) -> None:
        self.cluster = cluster
        self.kubectl = kubectl
        self.log = log

    def files(self) -> dict[Secret, Path | None]:
        """The Secrets this cluster mounts → the file each is kept equal to (an external
        database's password), or None for one made here once."""
        return roles.cluster_secrets(self.cluster.spec)

    def data(self, secret: Secret) -> bytes | None:
        """What the Secret holds now, or None when there is none."""
        key = secret.file.replace(".", "\\.")
        argv = self.kubectl.argv("get", "secret", secret.secret, "-o", f"jsonpath={{.data.{key}}}")
        proc = self.kubectl.run(argv)
        if proc.returncode and "NotFound" in proc.stderr:
            return None
        return base64.b64decode(checked(proc, f"reading Secret {secret.secret}"))

    def ensure(self) -> bool:
        """Create each missing Secret: fresh random bytes, made in a private temporary file that
        is removed right after (never rotated by a redeploy: the daemons would stop trusting
        each other, and the database keeps its password), or the external database's password
        file. True when that file changed since the last deploy and its Secret was replaced."""
        replaced = False
        for secret, source in self.files().items():
            current = self.data(secret)
            if current is not None and (source is None or current == source.read_bytes()):
                continue
            if current is not None:
                self.kubectl.check(
                    self.kubectl.argv("delete", "secret", secret.secret),
                    f"replacing Secret {secret.secret}",
                )
                replaced = True
            self.create(secret, source.read_bytes() if source else secret.new())
            done = "replaced" if current is not None else "created"
            how = f"from {source}" if source else "generated"
            print(f"{done} Secret {self.kubectl.namespace}/{secret.secret} ({how})", file=self.log)
        if roles.PORTAL_TLS in self.files():
            where = f"Secret {self.kubectl.namespace}/{roles.PORTAL_TLS.secret}"
            cert = portal_tls.check(where, self.data(roles.PORTAL_TLS) or b"")
            print(f"portal: TLS certificate SHA-256 {portal_tls.fingerprint(cert)}", file=self.log)
        return replaced

    def create(self, secret: Secret, data: bytes) -> None:
        """The Secret ``secret`` holding ``data``, made from a private temporary file that is
        removed right after."""
        with tempfile.TemporaryDirectory(prefix="slurmforge-secret-") as tmp:
            path = Path(tmp) / secret.file
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            self.kubectl.check(
                self.kubectl.argv(
                    "create", "secret", "generic", secret.secret,
                    f"--from-file={secret.file}={path}",
                ),
                f"creating Secret {secret.secret}",
            )  # fmt: skip

    def check_database(self) -> None:
        """Refuse, before anything is applied, a database slurmdbd could not use: an external
        one whose host does not resolve, refuses connections or refuses its login (checked from
        this machine), or the cluster's own whose claim outlived its password Secret or was
        made with another."""
        if not database.runs_own_database(self.cluster):
            return
        secret = roles.DB_PASSWORD
        password = self.data(secret)
        where = f"{self.cluster.path}: accounting: the database of cluster {self.cluster.name}"
        hint = (
            f"the claim {DATABASE_CLAIM} in namespace {self.kubectl.namespace} keeps the "
            f"accounting data; restore the Secret {secret.secret} it was made with, or delete "
            "the claim (all job records are lost)"
        )
        if password is None:
            claim = self.kubectl.run(self.kubectl.argv("get", "pvc", DATABASE_CLAIM, "-o", "name"))
            if claim.returncode == 0:
                raise ConfigError(f"{where} exists but its password Secret is gone", hint=hint)
            return
        if f"{DATABASE}-0" not in self.kubectl.running_pods(DATABASE):
            return  # the image refuses another password at start (images/mariadb/mariadb-init)
        marker = f"{roles.DATABASE_DATA.path}/{database.MARKER}"
        proc = self.kubectl.exec(f"{DATABASE}-0", DATABASE, "cat", marker)
        recorded = proc.stdout.strip() if proc.returncode == 0 else None
        if recorded and recorded != hashlib.sha256(password).hexdigest():
            raise ConfigError(
                f"{where} was created with another password than Secret {secret.secret} holds",
                hint=hint,
            )
