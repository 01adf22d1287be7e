"""`invoke backup`: a running cluster into one archive (archive.py) without stopping anything,
through the target's own way into its containers (access.py). What is copied and how it stays
consistent: snapshot.py, which also runs in the k8s target's scheduled backup pod. What both
targets' restores share is in restoring.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, TYPE_CHECKING, ClassVar

import yaml
from tqdm import tqdm

from slurmforge import jail_contract, state, version
from slurmforge.deploy import roles
from slurmforge.deploy.backup import snapshot
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.roles import CONTROLLER, CONTROLLER_STATE, DATABASE, LOGIN
from slurmforge.deploy.spec import layers
from slurmforge.deploy.spec.model import as_dict
from slurmforge.errors import ConfigError
from slurmforge.inputs import read_yaml

if TYPE_CHECKING:
    from slurmforge.deploy.backup.access import BackupAccess
    from slurmforge.deploy.spec.model import Cluster

STATE_DIR = CONTROLLER_STATE.path
DB_SOCKET = "/run/mysqld/mysqld.sock"
# the jail's user state, relative to the jail: what populate keeps, and the accounts it merges
JAIL_STATE = (
    "home", "opt/user", "etc/passwd", "etc/group", "etc/shadow", "etc/gshadow",
    "etc/ssh/ssh_host_*", ".slurmforge/jail", ".slurmforge/last-uid",
)  # fmt: skip


def default_dir(cluster_name: str) -> Path:
    """Where backups go unless --out says: beside the cluster's secrets (0700)."""
    return state.cluster_dir(cluster_name) / "backups"


def bar(what: str, total: int | None, log: IO[str]) -> tqdm:
    return tqdm(total=total, desc=what, unit="B", unit_scale=True, file=log, leave=False,
                disable=None)  # fmt: skip


def before_upgrade(target: BackupAccess) -> None:
    """Slurm's upgrade guide: back up the database and StateSave before a series change."""
    path, _ = backup(target, None)
    print(f"backup before the upgrade: {path} (invoke restore {path})", file=target.log)


class ContainerSource:
    """snapshot.Source through a deploy target: a command in the role's container."""

    db = f"--socket={DB_SOCKET}"
    ROLES: ClassVar = {
        snapshot.STATE: CONTROLLER,
        snapshot.DATABASE: DATABASE,
        snapshot.JAIL: LOGIN,
        snapshot.DIRECTORY: roles.DIRECTORY,
        snapshot.PORTAL: roles.PORTAL,
    }

    def __init__(self, target: BackupAccess) -> None:
        self.target = target

    def sh(self, where: str, command: str) -> tuple[int, str]:
        return self.target.sh(self.ROLES[where], command)

    def argv(self, where: str, command: str) -> list[str]:
        return self.target.exec_argv(self.ROLES[where], command)

    def secret(self, file: str, at: str) -> bytes | None:
        return self.target.secret(roles.SECRETS[file])


def standalone(cluster: Cluster, seed: str | None) -> str:
    """The cluster file as a restore writes it when it is given no other: its node sets with
    their layers applied and the node counts the cluster runs with (a scale is kept on the
    host that is gone), and its directory's seed named ``seed`` (written beside it). What else
    it names (site scripts, mounts, certificates) stays a path on the host."""
    raw = read_yaml(cluster.path)
    layers.apply(cluster.path, raw)
    raw.pop("layers", None)
    counts = {ns.name: ns.replicas for ns in cluster.spec.nodesets}
    for ns in raw.get("nodesets", []):
        ns["replicas"] = counts[ns["name"]]
    if seed is not None:
        raw["identity"]["ldap"]["seed"] = seed
    head = (
        f"# cluster {cluster.name} as backed up from {cluster.path}: node sets with their layers\n"
        "# applied and the node counts it ran with (slurmforge backup)\n"
    )
    return head + yaml.safe_dump(raw, sort_keys=False)


def plan(cluster: Cluster, slurm: str | None = None, scheduled: bool = False) -> snapshot.Plan:
    """What a backup of ``cluster`` copies (``slurm``: the version it runs, None to ask);
    ``scheduled``: by the k8s CronJob's pod, which mounts no claim of the portal's hub."""
    spec = cluster.spec
    files = {
        cluster.path.name: cluster.path.read_text(),
        "model.json": json.dumps(as_dict(cluster), indent=2) + "\n",
    }
    seed = None
    if sssd.embedded(spec):
        ldap = sssd.ldap_of(spec)
        assert ldap is not None
        seed = Path(ldap.seed).name
        seed = seed if seed not in files else f"seed-{seed}"
        files[seed] = (cluster.path.parent / ldap.seed).read_text()
    own = f"{cluster.name}.standalone.yaml"
    files[own] = standalone(cluster, seed)
    secrets, notes = {}, []
    for secret, source in roles.cluster_secrets(spec).items():
        if source is None:
            secrets[secret.file] = secret.path  # where the scheduled pod mounts it
        else:
            notes.append(f"{secret.file} is the site's file {source}: not in the archive")
    if spec.accounting.enabled and spec.accounting.database is not None:
        notes.append(
            f"the accounting database is the site's ({spec.accounting.database.host}): back it "
            "up there"
        )
    portal_db = None
    if spec.portal.enabled and scheduled:
        notes.append(
            "the portal's database is not in scheduled backups (its claim is the hub's alone): "
            "after a restore from one, users log in again; `invoke backup` keeps it"
        )
    elif spec.portal.enabled:
        portal_db = f"{roles.PORTAL_DATA.path}/{roles.PORTAL_DB}"
    return snapshot.Plan(
        cluster=cluster.name,
        slurm=slurm,
        slurmforge=version.describe(),
        images=dict(cluster.images),
        files=files,
        standalone=own,
        directory=seed is not None,
        portal_db=portal_db,
        secrets=secrets,
        state_dir=STATE_DIR,
        jail_root=jail_contract.ROOT,
        jail=[*JAIL_STATE, *(p.strip("/") for p in spec.jail.kept)],
        database=roles.OWN_DB_NAME if roles.own_database(spec) else None,
        notes=notes,
    )


def backup(target: BackupAccess, out: Path | None) -> tuple[Path, list[str]]:
    """Back ``target``'s cluster up into ``out`` (default: default_dir); the archive and the
    summary to show."""
    source = ContainerSource(target)
    log = target.log
    where = out or default_dir(target.cluster.name)
    try:
        return snapshot.Snapshot(
            plan(target.cluster), source, where, lambda what, total: bar(what, total, log)
        ).run()
    except ConfigError as exc:  # slurmctld does not answer
        raise ConfigError(f"--target {target.NAME}: {exc}", hint=exc.hint) from None
