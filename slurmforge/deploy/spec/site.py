"""The cluster file's site configuration schema (slurm/siteconf.py and slurm/accounts.py apply
it): the value types of Slurm settings, the QoS and accounts sacctmgr makes, storage mounted into
the jail, the topology; and each part's own check (checks.py runs them with the whole file)."""

from __future__ import annotations

import graphlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from slurmforge import jail_contract
from slurmforge.deploy.spec.fields import (
    NODE_DIRS,
    AbsPath,
    AccountName,
    DNSName,
    LabelKey,
    is_file,
)
from slurmforge.errors import ConfigError, quote
from slurmforge.inputs import Model

# a script next to the cluster file (or below it)
ScriptPath = Annotated[
    str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")
]


def _conf_value(value: str | int | bool) -> str | int | bool:
    if isinstance(value, str) and (not value or re.search(r"[#\x00-\x1f\x7f]", value)):
        raise ValueError(
            f"expected a value on one line, without '#' (Slurm's comment sign), got {quote(value)}"
        )
    return value


def _line_value(value: str | int | bool) -> str | int | bool:
    if isinstance(value, str) and re.search(r"\s", value):
        raise ValueError(
            f"expected a value without spaces (it shares its line with others), got {quote(value)}"
        )
    return value


# A site's setting of a Slurm configuration file: `Key: value` as the file writes Key=value
# (true/false as YES/NO). Keys are checked against the cell's own Slurm (slurm/siteconf.py).
ConfKey = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]
ConfValue = Annotated[StrictStr | StrictInt | StrictBool, AfterValidator(_conf_value)]
LineValue = Annotated[ConfValue, AfterValidator(_line_value)]


Tres = Annotated[
    str,
    StringConstraints(
        strict=True,
        pattern=r"^[a-z]+(/[A-Za-z0-9_:.-]+)?=-?[0-9]+[KMGTP]?(,[a-z]+(/[A-Za-z0-9_:.-]+)?=-?[0-9]+[KMGTP]?)*$",
    ),
]
Duration = Annotated[
    str, StringConstraints(strict=True, pattern=r"^(-1|[0-9]+(-[0-9]+)?(:[0-9]+){0,2})$")
]
Count = Annotated[StrictInt, Field(ge=-1)]
Text = Annotated[str, StringConstraints(strict=True, max_length=200)]
QosName = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z0-9_][a-z0-9_.-]{0,63}$")]


class Limits(Model):
    """sacctmgr's limits, under sacctmgr's own names (-1 clears one)."""

    GrpTRES: Tres | None = None
    """Trackable resources all running jobs together may use (cpu=64,mem=256G,gres/gpu=8)."""
    GrpJobs: Count | None = None
    """Jobs that may run at once, all together."""
    GrpSubmitJobs: Count | None = None
    """Jobs that may be pending or running at once, all together."""
    GrpWall: Duration | None = None
    """Wall time all running jobs together may use (minutes, or D-HH:MM:SS)."""
    MaxTRESPerJob: Tres | None = None
    """Trackable resources one job may use."""
    MaxTRESPerNode: Tres | None = None
    """Trackable resources one job may use on each node."""
    MaxWall: Duration | None = None
    """A job's longest run"""


class QosSpec(Limits):
    """A QoS, as `sacctmgr add/modify qos` takes it."""

    name: QosName
    """The QoS's name."""
    Description: Text | None = None
    """Free text."""
    Priority: Annotated[StrictInt, Field(ge=0)] | None = None
    """Added to a job's priority (with PriorityWeightQOS)."""
    Preempt: tuple[QosName, ...] | None = None
    """QoS whose jobs this QoS's jobs may preempt."""
    PreemptMode: Literal["off", "cancel", "requeue", "suspend"] | None = None
    """What happens to a preempted job."""
    Flags: (
        tuple[
            Literal[
                "DenyOnLimit",
                "EnforceUsageThreshold",
                "NoDecay",
                "NoReserve",
                "OverPartQOS",
                "PartitionMaxNodes",
                "PartitionMinNodes",
                "PartitionTimeLimit",
                "RequiresReservation",
                "UsageFactorSafe",
            ],
            ...,
        ]
        | None
    ) = None
    """sacctmgr's QoS flags."""
    UsageFactor: Annotated[float, Field(strict=True, ge=0)] | None = None
    """Usage is charged times this (0: free)."""
    GraceTime: Duration | None = None
    """How long a preempted job may run on before it is stopped."""
    MaxTRESPerUser: Tres | None = None
    """Trackable resources one user's running jobs may use."""
    MaxTRESPerAccount: Tres | None = None
    """Trackable resources one account's running jobs may use."""
    MaxJobsPerUser: Count | None = None
    """Running jobs per user."""
    MaxSubmitJobsPerUser: Count | None = None
    """Pending and running jobs per user."""
    MaxJobsPerAccount: Count | None = None
    """Running jobs per account."""
    MinTRESPerJob: Tres | None = None
    """Trackable resources a job must ask for at least."""


class AccountSpec(Limits):
    """An account, as `sacctmgr add/modify account` takes it."""

    name: AccountName
    """The account's name."""
    Parent: AccountName = "root"
    """The account above it in the tree."""
    Description: Text | None = None
    """Free text."""
    Organization: Text | None = None
    """Free text."""
    Fairshare: Annotated[StrictInt, Field(ge=0)] | None = None
    """Its share of the cluster against its siblings."""
    QOS: tuple[QosName, ...] | None = None
    """The QoS its users may use."""
    DefaultQOS: QosName | None = None
    """The QoS a job gets when it names none."""
    MaxJobs: Count | None = None
    """Running jobs per user of the account."""
    MaxSubmitJobs: Count | None = None
    """Pending and running jobs per user of the account."""


def _mount_path(path: str) -> str:
    top = path.strip("/").split("/")[0]
    if not top or top in (*NODE_DIRS, "tmp", jail_contract.ROOT.strip("/")):
        raise ValueError(
            f"expected a directory outside / and the jail's system directories "
            f"(/{', /'.join((*NODE_DIRS, 'tmp'))}), got {quote(path)}"
        )
    if "/../" in f"{path}/" or "/./" in f"{path}/" or "//" in path:
        raise ValueError(
            f"expected a plain absolute path (no '.', '..' or '//'), got {quote(path)}"
        )
    return path.rstrip("/")


class MountSpec(Model):
    """Site storage in the jail, where users and jobs see it (login and every node)."""

    path: Annotated[AbsPath, AfterValidator(_mount_path)]
    """Where it is mounted in the jail."""
    host_path: AbsPath | None = None
    """Local: a directory of this host; k8s: of each node"""
    claim: DNSName | None = None
    """K8s: a PersistentVolumeClaim of the cluster's namespace"""
    read_only: StrictBool = False
    """Mounted read-only for everyone."""

    @model_validator(mode="after")
    def _one_source(self) -> MountSpec:
        if (self.host_path is None) == (self.claim is None):
            raise ValueError("expected exactly one of host_path and claim")
        return self


SwitchName = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class SwitchSpec(Model):
    name: SwitchName
    """The switch's name."""
    nodesets: tuple[DNSName, ...] = ()
    """A leaf switch: the nodes of these node sets"""
    switches: tuple[SwitchName, ...] = ()
    """An upper one: these switches"""


class BlockSpec(Model):
    name: SwitchName
    """The block's name."""
    nodesets: tuple[DNSName, ...] = Field(min_length=1)
    """The node sets whose nodes make up the block."""


class LabelTopologySpec(Model):
    """The fabric as the Kubernetes nodes' labels say (k8s): node-watch writes topology.conf from
    the labels of the Kubernetes node each node pod runs on, and slurmctld reloads it whenever
    a label or a pod's placement changes."""

    tree: tuple[LabelKey, ...] = ()
    """Label keys of the switch levels, the top first (e.g. topology.kubernetes.io/zone, then a
    rack's): a node's switches are its Kubernetes node's values of them (topology/tree)"""
    block: LabelKey | None = None
    """The label key of a node's block (nvidia.com/gpu.clique: its NVLink domain;
    topology/block)"""
    unplaced: SwitchName = "unplaced"
    """The leaf switch, or block, of the nodes whose Kubernetes node lacks one of the labels, or
    that have no pod running (never an empty topology)"""

    @model_validator(mode="after")
    def _one_kind(self) -> LabelTopologySpec:
        if bool(self.tree) == (self.block is not None):
            raise ValueError("expected exactly one of tree and block")
        return self


class TopologySpec(Model):
    """The fabric (topology.conf): a tree of switches, or blocks of nodes, declared here or read
    from the Kubernetes nodes' labels."""

    tree: tuple[SwitchSpec, ...] = ()
    """A tree of switches (topology/tree)."""
    block: tuple[BlockSpec, ...] = ()
    """Blocks of nodes (topology/block, Slurm >= 24.05)."""
    labels: LabelTopologySpec | None = None
    """K8s: from the Kubernetes nodes' labels (a local cluster has every node unplaced)"""
    block_sizes: tuple[Annotated[StrictInt, Field(ge=1)], ...] = ()
    """The block sizes Slurm may place jobs on (BlockSizes; Slurm >= 24.05)."""

    @model_validator(mode="after")
    def _one_kind(self) -> TopologySpec:
        if [bool(self.tree), bool(self.block), self.labels is not None].count(True) != 1:
            raise ValueError("expected exactly one of tree, block and labels")
        if self.block_sizes and not (self.block or (self.labels and self.labels.block)):
            raise ValueError("block_sizes: expected block")
        return self

    @property
    def kind(self) -> str:
        """The plugin: tree or block."""
        return "tree" if self.tree or (self.labels and self.labels.tree) else "block"


SCRIPT_MAX = 1 << 20


def check_scripts(path: Path, kind: str, scripts: Sequence[str]) -> None:
    """The site's ``slurm.<kind>`` scripts exist next to the cluster file and are scripts."""
    for i, rel in enumerate(scripts):
        where = f"{path}: slurm.{kind}[{i}]"
        if ".." in Path(rel).parts or not is_file(str(path.parent / rel)):
            raise ConfigError(
                f"{where}: expected a script file next to the cluster file (or below it), "
                f"got {quote(rel)}"
            )
        data = (path.parent / rel).read_bytes()
        if len(data) > SCRIPT_MAX or not data.startswith(b"#!"):
            raise ConfigError(
                f"{where}: expected a script of at most 1 MiB that starts with '#!' (slurmd "
                f"runs it as a program), got {rel}"
            )
        try:
            data.decode()
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{where}: {rel} is not UTF-8 text (byte {exc.start})") from None


def check_mounts(path: Path, scratch: Sequence[str], mounts: Sequence[MountSpec]) -> None:
    """No mount overlaps the jail's scratch directories or another mount."""
    taken = [(f"jail.scratch[{i}]", s) for i, s in enumerate(scratch)]
    for i, mount in enumerate(mounts):
        for where, other in taken:
            if _nested(mount.path, other):
                raise ConfigError(
                    f"{path}: mounts[{i}].path: {mount.path} overlaps {where} ({other})"
                )
        taken.append((f"mounts[{i}].path", mount.path))


def check_topology(path: Path, topology: TopologySpec, names: Sequence[str]) -> None:
    """Switches and blocks are named once and name node sets (``names``) and switches the file
    declares."""
    switches = [s.name for s in topology.tree]
    blocks = [b.name for b in topology.block]
    for kind, seen in (("tree", switches), ("block", blocks)):
        for name in {n for n in seen if seen.count(n) > 1}:
            raise ConfigError(f"{path}: topology.{kind}: duplicate name {name!r}")
    for kind, entries in (("tree", topology.tree), ("block", topology.block)):
        for i, entry in enumerate(entries):
            for j, ns in enumerate(entry.nodesets):
                if ns not in names:
                    raise ConfigError(
                        f"{path}: topology.{kind}[{i}].nodesets[{j}]: unknown node set "
                        f"{ns!r}; expected one of {', '.join(names)}"
                    )
    for i, switch in enumerate(topology.tree):
        for j, name in enumerate(switch.switches):
            if name not in switches or name == switch.name:
                raise ConfigError(
                    f"{path}: topology.tree[{i}].switches[{j}]: {name!r} is not another "
                    "switch of topology.tree"
                )


def check_qos(path: Path, qos: Sequence[QosSpec], accounts: Sequence[AccountSpec]) -> None:
    """QoS and accounts are named once each, name QoS the file declares (or ``normal``), and
    no QoS preempts itself."""
    for kind, records in (("qos", qos), ("accounts", accounts)):
        seen: dict[str, int] = {}
        for i, record in enumerate(records):
            if record.name in seen:
                raise ConfigError(
                    f"{path}: accounting.{kind}[{i}].name: {record.name!r} is "
                    f"accounting.{kind}[{seen[record.name]}] already; name each once"
                )
            seen[record.name] = i
    names = ["normal", *(q.name for q in qos)]
    for i, q in enumerate(qos):
        for j, other in enumerate(q.Preempt or ()):
            if other not in names:
                raise ConfigError(
                    f"{path}: accounting.qos[{i}].Preempt[{j}]: unknown QoS {other!r}; expected "
                    f"one of {', '.join(names)}"
                )
    _check_loops(path, qos, accounts)
    for i, acct in enumerate(accounts):
        for j, name in enumerate(acct.QOS or ()):
            if name not in names:
                raise ConfigError(
                    f"{path}: accounting.accounts[{i}].QOS[{j}]: unknown QoS {name!r}; "
                    f"expected one of {', '.join(names)}"
                )
        if acct.DefaultQOS and acct.DefaultQOS not in (acct.QOS or ("normal",)):
            raise ConfigError(
                f"{path}: accounting.accounts[{i}].DefaultQOS: {acct.DefaultQOS!r} is not in "
                "its QOS list"
            )


def _check_loops(path: Path, qos: Sequence[QosSpec], accounts: Sequence[AccountSpec]) -> None:
    """No QoS preempts itself and no account is its own parent, directly or through others:
    slurmdbd refuses the one after the QoS that closes the loop is made, and the deploy, adding
    parents first, found no account to start from only once the cluster was up. (A parent named
    nowhere in the file may be in the accounting database already; the deploy says if not.)"""
    i, loop = _loop({q.name: tuple(q.Preempt or ()) for q in qos})
    if loop:
        raise ConfigError(
            f"{path}: accounting.qos[{i}].Preempt: QoS preempt each other in a loop ({loop})"
            "; Slurm refuses it"
        )
    i, loop = _loop({a.name: (a.Parent,) for a in accounts})
    if loop:
        raise ConfigError(
            f"{path}: accounting.accounts[{i}].Parent: accounts are each other's parents in a loop"
            f" ({loop}); an account tree starts at root"
        )


def _loop(graph: dict[str, tuple[str, ...]]) -> tuple[int, str]:
    """A loop in ``graph`` (name: names it points at) as 'a -> b -> a', and a's index; or -1, ''."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        loop = exc.args[1]
        return list(graph).index(loop[0]), " -> ".join(reversed(loop))
    return -1, ""


def _nested(a: str, b: str) -> bool:
    """Whether one of two absolute paths is the other or below it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")
