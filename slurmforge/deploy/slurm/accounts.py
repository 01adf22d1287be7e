"""The QoS and accounts a cluster file declares (accounting.qos, accounting.accounts), made or
brought up to date with sacctmgr on every deploy, for both targets.

A file that declares no QoS (no accounts) leaves them to the site's own sacctmgr. Each declared
QoS or account is added with its settings when slurmdbd lacks it, else given every setting the
file names (`sacctmgr modify ... set`); what the file leaves out keeps the value it has. Nothing
that was there before the deploy is ever deleted: once a file declares QoS (accounts), one that
slurmdbd has and the file does not declare is reported, with the sacctmgr line that removes it.

Commands run through ``sh`` (a shell in slurmctld, as root), as in ctl.py. Every word that comes
from outside the cluster file (a directory group's member names, what slurmdbd lists) is passed
as one quoted argument (``_argv``), so no name can add a word or a command to that shell.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from slurmforge.deploy.spec.model import Cluster
from slurmforge.deploy.spec.site import AccountSpec, QosSpec
from slurmforge.errors import DeployError

Sh = Callable[[str], tuple[int, str]]
# what slurmdbd has without being told (the cluster's root account, Slurm's own QoS)
BUILT_IN_QOS = ("normal",)
BUILT_IN_ACCOUNTS = ("root",)
# a directory member name slurmforge hands to sacctmgr (POSIX's portable user names, and the
# @ of a realm); any other is reported and left out
MEMBER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,254}")


def _argv(*words: str) -> str:
    """One command line of ``words``, each a single argument whatever it holds."""
    return shlex.join(words)


def _value(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "''"
    return shlex.quote(str(value))


def settings(record: QosSpec | AccountSpec, skip: tuple[str, ...]) -> list[str]:
    """``Key=value`` for each setting the file gives, in the model's order."""
    data = record.model_dump(exclude_none=True)
    return [f"{k}={_value(v)}" for k, v in data.items() if k not in ("name", *skip)]


def names(sh: Sh, kind: str) -> list[str]:
    field = "account" if kind == "account" else "name"
    code, out = sh(f"sacctmgr -n -P show {kind} format={field}")
    if code:
        raise DeployError(f"sacctmgr show {kind} failed: {out[-300:]}")
    return [line.strip() for line in out.splitlines() if line.strip()]


def run(sh: Sh, command: str, what: str) -> None:
    code, out = sh(f"sacctmgr -i {command}")
    # a modify that changes nothing says so and exits non-zero: that is the idempotent case
    if code and "nothing modified" not in out.lower():
        detail = " ".join(out.split())[-300:]  # one line: an error may be followed by more
        raise DeployError(f"sacctmgr could not {what}: {detail}")


def apply(cluster: Cluster, sh: Sh) -> list[str]:
    """Make the declared QoS and accounts what the file says; lines reporting the undeclared.

    A QoS or account slurmdbd lacks is added with every setting in the one `sacctmgr add` (a
    refused setting adds nothing), Preempt aside: it names QoS that may be added in the same
    run, so it is set once all exist. Where anything is refused after that, the QoS and
    accounts this run added are deleted again before the error is raised, so none is left
    without its limits."""
    accounting = cluster.spec.accounting
    if not accounting.qos and not accounting.accounts:
        return []
    have = names(sh, "qos")
    have_accounts = names(sh, "account")
    added: list[tuple[str, str]] = []  # (kind, name), in the order made
    try:
        _make(cluster, sh, have, have_accounts, added)
    except DeployError as exc:
        undone = _undo(sh, added)
        if undone:
            raise DeployError(
                f"{exc}; removed again what this deploy had added: {undone}"
            ) from None
        raise
    report = members(cluster, sh)
    # what slurmdbd had beyond the file (all it gained since is declared)
    if accounting.qos:
        wanted = {*BUILT_IN_QOS, *(q.name for q in accounting.qos)}
        report += [_undeclared(cluster, "qos", "QoS", n) for n in have if n not in wanted]
    if accounting.accounts:
        wanted = {*BUILT_IN_ACCOUNTS, accounting.default_account}
        wanted |= {a.name for a in accounting.accounts}
        report += [
            _undeclared(cluster, "account", "account", n) for n in have_accounts if n not in wanted
        ]
    return report


def _make(
    cluster: Cluster,
    sh: Sh,
    have: list[str],
    have_accounts: list[str],
    added: list[tuple[str, str]],
) -> None:
    accounting = cluster.spec.accounting
    for qos in accounting.qos:
        if qos.name not in have:
            given = " ".join(settings(qos, ("Preempt",)))
            run(sh, f"add qos {qos.name} {given}".rstrip(), f"add QoS {qos.name}")
            added.append(("qos", qos.name))
    for qos in accounting.qos:  # once all exist: Preempt names others
        new = ("qos", qos.name) in added
        # sacctmgr takes Preempt only after PreemptMode
        given = sorted(settings(qos, ()), key=lambda s: s.startswith("Preempt="))
        if new:
            given = [s for s in given if s.startswith("Preempt=")]
        if given:
            command = f"modify qos where name={qos.name} set {' '.join(given)}"
            run(sh, command, f"set QoS {qos.name}")
    pending = [a for a in accounting.accounts if a.name not in have_accounts]
    made = list(have_accounts)
    while pending:  # parents first
        ready = [a for a in pending if a.Parent in made]
        if not ready:
            missing = ", ".join(f"{a.name} (parent {a.Parent})" for a in pending)
            raise DeployError(f"accounts whose parent exists nowhere: {missing}")
        for account in ready:
            given = " ".join(settings(account, ("Parent",)))
            command = f"add account {account.name} Parent={account.Parent} {given}".rstrip()
            run(sh, command, f"add account {account.name}")
            added.append(("account", account.name))
            made.append(account.name)
        pending = [a for a in pending if a not in ready]
    for account in accounting.accounts:
        given = settings(account, ("Parent",))
        if given and ("account", account.name) not in added:
            command = f"modify account where name={account.name} set {' '.join(given)}"
            run(sh, command, f"set account {account.name}")


def members(cluster: Cluster, sh: Sh) -> list[str]:
    """Each account of accounting.accounts_from_groups gets exactly its group's members as
    users: associations are added for new members and deleted for those who left (slurmdbd
    keeps their job records). Groups are read fresh through slurmctld's SSSD (its cache is
    invalidated first); a group that cannot be read changes nothing, so a directory that is
    away never empties an account. Lines saying what changed or was left."""
    mapping = cluster.spec.accounting.accounts_from_groups
    if not mapping:
        return []
    sh("sss_cache -G")  # the group lists as the directory has them now
    report = []
    for account, group in mapping.items():
        code, out = sh(f"getent group {shlex.quote(group)}")
        fields = out.strip().split(":")
        if code or len(fields) != 4:
            report.append(
                f"account {account}: group {group} could not be read from the directory "
                f"(getent exit {code}); its users were left as they are"
            )
            continue
        listed = {m for m in fields[3].split(",") if m}
        odd = sorted(m for m in listed if not MEMBER.fullmatch(m))
        if odd:
            report.append(
                f"account {account}: left out members of {group} whose names are no user "
                f"names: {', '.join(repr(m) for m in odd)}"
            )
        wanted = sorted(listed - set(odd))
        code, out = sh(
            _argv(
                "sacctmgr",
                "-n",
                "-P",
                "show",
                "associations",
                "where",
                f"account={account}",
                "format=user",
            )
        )
        if code:
            raise DeployError(f"sacctmgr show associations failed: {out[-300:]}")
        have = sorted({u.strip() for u in out.splitlines() if u.strip()})
        new = [u for u in wanted if u not in have]
        gone = [u for u in have if u not in wanted]
        if new:
            users = _argv("add", "user", ",".join(new), f"account={account}")
            run(sh, users, f"add {account}'s users")
            report.append(f"account {account}: added {', '.join(new)} (members of {group})")
        for user in gone:  # one at a time: one with jobs still running keeps its association
            code, out = sh(_argv("sacctmgr", "-i", "delete", "user", user, f"account={account}"))
            if code:
                detail = " ".join(out.split())[-200:]
                report.append(
                    f"account {account}: {user} is not in {group} but keeps the association "
                    f"for now: {detail}"
                )
            else:
                report.append(
                    f"account {account}: removed {user} (not in {group}; the records of "
                    "their jobs stay)"
                )
    return report


def _undo(sh: Sh, added: list[tuple[str, str]]) -> str:
    """Delete what this run added, children before parents; names what was deleted."""
    undone = []
    for kind, name in reversed(added):
        code, _ = sh(_argv("sacctmgr", "-i", "delete", kind, name))
        if code == 0:
            undone.append(f"{'QoS' if kind == 'qos' else kind} {name}")
    return ", ".join(undone)


def _undeclared(cluster: Cluster, kind: str, label: str, name: str) -> str:
    return (
        f"{label} {name} is in slurmdbd but not in {cluster.path.name}; left as it is (remove "
        f"it: sacctmgr delete {kind} {name})"
    )
