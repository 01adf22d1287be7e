"""What the local target writes: the reviewable directory (the Compose file, Slurm's config, the
local Prometheus' and SSSD's) and the cluster's secrets, kept outside the repository."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from slurmforge import state
from slurmforge.deploy import generated, monitoring, portal, portal_tls, roles
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.local import gpu_assign, render
from slurmforge.deploy.local.compose import Project
from slurmforge.deploy.roles import (
    DBD_CONF,
    DIRECTORY_CONF,
    IDENTITY_CONF,
    JAIL_CONF,
    PORTAL_CONF,
    PROMETHEUS_CONF,
    SLURM_CONF,
)
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.deploy.spec.model import Cluster, as_dict


def _texts(directory: Path) -> dict[str, str]:
    """File name → content of a generated directory (empty when it is not there yet)."""
    if not directory.is_dir():
        return {}
    return {p.name: p.read_text() for p in sorted(directory.iterdir()) if p.is_file()}


class Files:
    """The files of ``cluster`` in ``directory``. ``dry_run``: name the secrets' places and make
    none, and signal no running container."""

    def __init__(
        self,
        cluster: Cluster,
        directory: Path,
        project: Project,
        log: IO[str],
        dry_run: bool = False,
    ) -> None:
        self.cluster = cluster
        self.dir = directory
        self.project = project
        self.log = log
        self.dry_run = dry_run
        self.dbd_changed = False  # by the last write (slurmdbd reads its config at start)

    def secrets(self) -> dict[str, Path]:
        """The files the containers are given: the munge key and, with accounting, the JWT key
        and the database password (the external database's own file, when it has one). Kept
        outside the repository; made at the first deploy and reused by every later one (a dry
        run names where they are or would be, and makes none)."""
        out = {}
        for secret, source in roles.cluster_secrets(self.cluster.spec).items():
            if source is not None:
                out[secret.file] = source
                continue
            if self.dry_run:
                out[secret.file] = state.cluster_dir(self.cluster.name) / secret.file
                continue
            out[secret.file], made = state.ensure_secret(self.cluster.name, secret.file, secret.new)
            if made:
                print(f"generated {secret.file} {out[secret.file]}", file=self.log)
            if secret.group is not None:  # at every deploy: a restore writes it root's alone
                _readable_by(out[secret.file], secret.group)
        if roles.PORTAL_TLS.file in out and not self.dry_run:
            path = out[roles.PORTAL_TLS.file]
            cert = portal_tls.checked_file(str(path), path)
            print(f"portal: TLS certificate SHA-256 {portal_tls.fingerprint(cert)}", file=self.log)
        return out

    def write(
        self,
        jail_id: str,
        secrets: dict[str, Path],
        assignment: gpu_assign.Assignment,
        pyxis: bool,
    ) -> bool:
        """Write the reviewable directory; True when the nodes' Slurm config changed (a file of
        it: slurm.conf, cgroup.conf, topology.conf, a script; slurmd and slurmctld then re-read
        it), False on the first write."""
        conf = self.dir / SLURM_CONF.local
        before = _texts(conf)
        slurmconf.write(
            self.cluster, conf, self.dir / JAIL_CONF.local, assignment.gres_files(), pyxis
        )
        self.dbd_changed = False
        if self.cluster.spec.accounting.enabled:
            dbd = self.dir / DBD_CONF.local
            dbd.mkdir(parents=True, exist_ok=True)
            was = _texts(dbd)
            (dbd / "slurmdbd.conf").write_text(slurmconf.slurmdbd_conf(self.cluster))
            self.dbd_changed = bool(was) and was != _texts(dbd)
        self.prometheus(assignment)
        self.identity()
        data = render.render(self.cluster, secrets, jail_id, assignment, self.dir)
        self.project.file.write_text(render.dump(data, str(self.cluster.path)))
        (self.dir / "model.json").write_text(json.dumps(as_dict(self.cluster), indent=2) + "\n")
        return bool(before) and before != _texts(conf)

    def prometheus(self, assignment: gpu_assign.Assignment) -> None:
        """The local Prometheus' configuration and rules; a running one re-reads them (SIGHUP)
        when they changed."""
        directory = self.dir / PROMETHEUS_CONF.local
        if roles.role(roles.PROMETHEUS) not in roles.running(self.cluster.spec, "local"):
            return
        directory.mkdir(parents=True, exist_ok=True)
        was = _texts(directory)
        gpu_nodes = render.gpu_metrics_nodes(self.cluster, assignment)
        source = str(self.cluster.path)
        config = monitoring.prometheus_config(self.cluster, gpu_nodes)
        (directory / monitoring.CONFIG_FILE).write_text(generated.dump_yaml(config, source))
        rules = monitoring.rules(self.cluster)
        (directory / monitoring.RULES_FILE).write_text(generated.dump_yaml(rules, source))
        changed = was and was != _texts(directory)
        if changed and not self.dry_run and self.project.running(roles.PROMETHEUS):
            self.project.compose("kill", "-s", "SIGHUP", roles.PROMETHEUS)

    def identity(self) -> None:
        """SSSD's configuration (no password in it) and the jail's sudo rule; the embedded
        directory's seed; the portal's settings. Containers read them when they start (a change
        restarts them: the Compose file names their digests)."""
        spec = self.cluster.spec
        for config, files in (
            (IDENTITY_CONF, sssd.files(spec, self.cluster.path)),
            (DIRECTORY_CONF, sssd.directory_files(spec, self.cluster.path)),
            (PORTAL_CONF, portal.files(self.cluster)),
        ):
            directory = self.dir / config.local
            if not files:
                continue
            directory.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                if config is DIRECTORY_CONF:  # the seed may hold password hashes: root's alone
                    state.write_private(directory / name, text.encode())
                else:
                    (directory / name).write_text(text)


def _readable_by(path: Path, group: int) -> None:
    """``path`` readable by ``group`` as well as its owner. A deployer who is not root cannot
    give it another group: it is then readable by all, which on this host its 0700 directory
    still confines to her; inside the containers that mount it, no user's code runs."""
    if os.geteuid() == 0:
        os.chown(path, -1, group)
        os.chmod(path, 0o440)
    else:
        os.chmod(path, 0o444)
