"""`invoke backup` and the parts both restores share: a running cluster into one archive
(archive.py) without stopping anything, through the target's own way into its containers
(access.py). What is copied and how it stays consistent: snapshot.py, which also runs in the k8s
target's scheduled backup pod.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, ClassVar

import yaml
from tqdm import tqdm

from slurmforge import jail_contract, state, version
from slurmforge.deploy import roles
from slurmforge.deploy.backup import archive, snapshot
from slurmforge.deploy.backup.snapshot import job_table
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.roles import CONTROLLER, CONTROLLER_STATE, DATABASE, LOGIN
from slurmforge.deploy.slurm import upgrade
from slurmforge.deploy.spec import layers
from slurmforge.deploy.spec.model import as_dict
from slurmforge.errors import ConfigError, DeployError
from slurmforge.inputs import read_yaml

if TYPE_CHECKING:
    from slurmforge.deploy.backup.access import BackupAccess
    from slurmforge.deploy.spec.model import Cluster

STATE_DIR = CONTROLLER_STATE.path
# the embedded directory's entries in an archive, and the file a restore leaves in slapd's data
# volume for images/slapd/slapd-init to load in place of the seed
DIRECTORY_MEMBER, DIRECTORY_RESTORE = snapshot.DIRECTORY_MEMBER, "restore.ldif"
PORTAL_MEMBER = snapshot.PORTAL_MEMBER
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


def admit(cluster: Cluster, path: Path, manifest: archive.Manifest) -> bool:
    """Refuse an archive of another cluster than ``cluster``, and a move from the archive's Slurm
    to the cluster file's that Slurm cannot make; True when the restore changes the series."""
    if manifest.cluster != cluster.name:
        raise ConfigError(
            f"{path}: holds cluster {manifest.cluster}, but {cluster.path} is cluster "
            f"{cluster.name}",
            hint=f"give --cluster the file of {manifest.cluster} (the archive holds a copy under "
            "cluster/)",
        )
    return upgrade.check(
        f"{cluster.path}: images", cluster.name, manifest.slurm, cluster.cell.slurm
    )


def feed(argv: list[str], source: IO[bytes], what: str, bar: tqdm) -> None:
    """Run ``argv`` with ``source`` on its standard input."""
    with tempfile.TemporaryFile() as err, bar:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=err, stderr=err)
        assert proc.stdin is not None
        try:
            for chunk in archive.chunks(source):
                proc.stdin.write(chunk)
                bar.update(len(chunk))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        if proc.wait():
            err.seek(0)
            tail = " / ".join(err.read().decode(errors="replace").strip().splitlines()[-3:])
            raise DeployError(f"restoring {what} failed (exit {proc.returncode}): {tail}")


def feed_member(
    path: Path, manifest: archive.Manifest, member: str, argv: list[str], what: str, log: IO[str]
) -> None:
    """Run ``argv`` with the archive's ``member`` on its standard input (a progress bar)."""
    with archive.member(path, member) as source:
        feed(argv, source, what, bar(member, manifest.members[member]["size"], log))


def load_dump(
    target: BackupAccess, path: Path, manifest: archive.Manifest, tail: Callable[[], str] = str
) -> None:
    """Once the cluster's own database answers: the archive's dump into it, and its job table
    started at the manifest's job_index (a job StateSave holds may have an index the dump lacks:
    new jobs start above it, never on its row). ``tail``: what to show when it never answers."""
    deadline = time.monotonic() + 300
    while target.sh(DATABASE, f"mariadb-admin --socket={DB_SOCKET} ping")[0]:
        if time.monotonic() > deadline:
            raise DeployError(f"{DATABASE} does not answer after 300 s\n{tail()}".rstrip())
        time.sleep(1)
    argv = target.exec_argv(DATABASE, f"mariadb --socket={DB_SOCKET}")
    feed_member(path, manifest, "database.sql", argv, "the accounting database", target.log)
    if manifest.job_index:
        table, start = job_table(target.cluster.name), int(manifest.job_index)
        sql = f"alter table {table} auto_increment = {start}"
        code, out = target.sh(DATABASE, f"mariadb --socket={DB_SOCKET} -e {shlex.quote(sql)}")
        if code:
            raise DeployError(f"{DATABASE}: {sql} failed: {out}")


RESTORED = "cluster"  # under the cluster's state directory: its file, as the archive holds it


def unpack_cluster(path: Path) -> Path:
    """For a restore given no cluster file: the archive's own (take.standalone) and the seed
    it names, written into the cluster's state directory (0700, beside its secrets); the
    file's path. A file there that differs from the archive's is refused, never replaced."""
    manifest = archive.verify(path)
    member = manifest.standalone
    if member is None or member not in manifest.members:
        raise ConfigError(
            f"{path}: the archive holds no cluster file a restore can use alone (a backup "
            "before slurmforge kept one)",
            hint=f"extract cluster/ from it (tar -xf {path} cluster/) and give --cluster",
        )
    if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", manifest.cluster):  # the cluster file's rule
        raise ConfigError(f"{path}: {archive.MANIFEST} names cluster {manifest.cluster!r}")
    directory = state.cluster_dir(manifest.cluster) / RESTORED
    text = _member_text(path, manifest, member)
    wanted = {f"{manifest.cluster}.yaml": text}
    seed = _seed_of(path, member, text)
    if seed is not None:
        wanted[seed] = _member_text(path, manifest, f"cluster/{seed}")
    for name, content in wanted.items():
        file = directory / name
        if file.exists() and file.read_text() != content:
            raise ConfigError(
                f"{file}: differs from the cluster file in {path.name} (an earlier restore's, "
                "since changed?)",
                hint=f"restore with --cluster {file}, or move it away",
            )
    directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # it holds the secrets
    directory.mkdir(exist_ok=True, mode=0o700)
    for name, content in wanted.items():
        state.write_private(directory / name, content.encode())
    return directory / f"{manifest.cluster}.yaml"


def _seed_of(path: Path, member: str, text: str) -> str | None:
    """The seed the archive's cluster file names (take.standalone writes a plain name)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: {member} is not a cluster file (a YAML mapping)")
    for key in ("identity", "ldap", "seed"):
        data = data.get(key) if isinstance(data, dict) else None
    return None if data is None else str(data)


def _member_text(path: Path, manifest: archive.Manifest, member: str) -> str:
    """A cluster/ member's text (one the archive holds, and named as its layout names one)."""
    if (
        archive.layout_error(member)
        or not member.startswith("cluster/")
        or (member not in manifest.members)
    ):
        raise ConfigError(f"{path}: the archive's cluster file names {member!r}, which it lacks")
    with archive.member(path, member) as source:
        try:
            return source.read().decode()
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: {member} is not UTF-8 text") from None


def restores_directory(cluster: Cluster, manifest: archive.Manifest) -> bool:
    """The archive's directory goes into ``cluster``'s own slapd (one that has none: a note
    says the archive's is left out)."""
    if DIRECTORY_MEMBER not in manifest.members:
        return False
    if not sssd.embedded(cluster.spec):
        note = (
            f"the archive's directory is not restored: {cluster.path} has no embedded one "
            "(identity.ldap.embedded)"
        )
        if note not in manifest.notes:
            manifest.notes.append(note)
        return False
    return True


def restores_portal(cluster: Cluster, manifest: archive.Manifest) -> bool:
    """The archive's hub database goes into ``cluster``'s portal (a cluster without one: a note
    says it is left out)."""
    if PORTAL_MEMBER not in manifest.members:
        return False
    if not cluster.spec.portal.enabled:
        note = f"the archive's portal database is not restored: {cluster.path} has no portal"
        if note not in manifest.notes:
            manifest.notes.append(note)
        return False
    return True


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
