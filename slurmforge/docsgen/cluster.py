"""Reference pages of what a cluster is made of, from the tables the build and the deploy read:
the images and the roles that run them (components.py, roles.ROLES), the labels slurmforge puts
on images, containers and pods, the metrics the exporter serves and the alert rules
(the exporter's families, monitoring.rules), and the files and volumes a deploy writes
(roles' secrets, config directories and data)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmforge import components, features
from slurmforge.deploy import roles
from slurmforge.deploy.target import TARGETS

GENERATED = (
    "Generated from the code (`invoke docs` writes it; the unit tier fails when it is stale)."
)


def _when(predicate: Callable[..., bool]) -> str:
    name = getattr(predicate, "__name__", "")
    return "" if name in ("_always", "<lambda>") else name.lstrip("_").replace("_", " ")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows), ""]


def _code(items: Any) -> str:
    return ", ".join(f"`{i}`" for i in items) or "—"


# Every label slurmforge sets, and what it says; the page refuses a label the code sets that is
# not here (found by its string in the source), so a new one lands with its line.
LABELS = {
    "org.opencontainers.image.created": "image: when it was built (`$SOURCE_DATE_EPOCH` if set)",
    "org.opencontainers.image.revision": "image: the checkout's commit (`-dirty` with changes)",
    "org.opencontainers.image.source": "image: the checkout's `origin` remote",
    "org.opencontainers.image.title": "image: its component",
    "org.opencontainers.image.version": "image: its tag",
    "io.slurmforge.version": "image: the slurmforge that built it (`invoke version`)",
    "io.slurmforge.slurm": "image: the Slurm version it was built for",
    "io.slurmforge.inputs-hash": "image: the hash of every input of its build; equal: reused",
    "io.slurmforge.inputs": "image: those inputs, named (what `invoke plan` compares)",
    "io.slurmforge.features": "image: the tools it carries (pyxis, enroot, nccl-tests, ...)",
    "io.slurmforge.skipped": "image: optional tools left out for want of their sources",
    "io.slurmforge.jail-populate": "volume or directory: a jail populate wrote (and may rewrite)",
    "io.slurmforge.cluster": "container (local): the cluster it belongs to",
    "io.slurmforge.role": "container (local): its role",
    "io.slurmforge.nodeset": "container (local): a node's node set",
    "io.slurmforge.bound": "container (local): the host files its bind mounts are",
    "io.slurmforge.identity": "container (local): the directory settings it started with",
    "io.slurmforge.portal": "container (local): the portal settings the hub started with",
    "app.kubernetes.io/name": "Kubernetes object: `slurmforge`",
    "app.kubernetes.io/instance": "Kubernetes object: the cluster's name",
    "app.kubernetes.io/component": "Kubernetes object: its role",
    "app.kubernetes.io/part-of": "Kubernetes object: `slurm`",
    "app.kubernetes.io/managed-by": "Kubernetes object: `slurmforge`",
    "app.kubernetes.io/version": "Kubernetes object: the cell's Slurm version",
    "slurmforge.io/nodeset": "node pod: its node set",
    "slurmforge.io/node": "node pod: its Slurm node's name",
    "slurmforge.io/config-hash": "pod template: the hash of its Slurm config (a change rolls it)",
    "slurmforge.io/config": "pod annotation: the Slurm config it was told to load",
}
_LABEL = re.compile(
    r'"((?:io\.slurmforge|org\.opencontainers\.image|app\.kubernetes\.io|slurmforge\.io)[./][a-z-]+)"'
)


def _labels_in_code(root: Path) -> set[str]:
    found = set()
    for path in [root / "tasks.py", *sorted((root / "slurmforge").rglob("*.py"))]:
        if path.parent.name != "docsgen":
            found |= set(_LABEL.findall(path.read_text()))
    return found


def images_page(root: Path) -> str:
    unlisted = _labels_in_code(root) - set(LABELS)
    if unlisted:
        raise AssertionError(f"labels set by the code but not in docsgen LABELS: {unlisted}")
    lines = ["# Images, roles and labels", ""]
    lines += [
        "An **image** is built once per cell of a matrix set (its axes say which: distro, Slurm, "
        "CUDA); `invoke build` builds them parents first and reuses any whose inputs did not "
        "change. A **role** is one part of a running cluster: which image it runs, which ports "
        "it listens on, what it mounts, and who may reach it. " + GENERATED,
        "",
        "## Images",
        "",
    ]
    rows = []
    for c in components.COMPONENTS.values():
        carried = [f.name for f in features.FEATURES.values() if c.name in f.carried_by]
        kind = "pushed" if c.public else "internal"
        rows.append(
            [f"`{c.name}`", c.help, ", ".join(c.axes), _code(c.parents), _code(carried), kind]
        )
    lines += _table(["image", "what it is", "one per", "built on", "carries", "kind"], rows)
    lines += ["## Roles", ""]
    lines += [
        "Ports marked *published* are reachable from outside the cluster (locally on "
        "`login.address`, on Kubernetes through a Service); the others only from the roles on "
        "the same network. `internal` networks reach nothing outside the cluster.",
        "",
    ]
    rows = []
    for r in roles.ROLES:
        ports = [
            f"{p.number} ({p.name}{', published: ' + p.publish if p.publish else ''})"
            for p in r.ports
        ]
        image = f"`{r.image}`" if r.image else "the node set's"
        nets = [f"{n}{' (internal)' if n in roles.INTERNAL_NETS else ''}" for n in r.networks]
        caps = ", ".join(r.capabilities) or "none"
        extra = "; ".join(
            x
            for x in (
                f"jail {r.jail}" if r.jail else "",
                f"scraped on {r.scraped.number}" if r.scraped else "",
                f"only when: {_when(r.when)}" if _when(r.when) else "",
                f"targets: {', '.join(r.targets)}" if tuple(r.targets) != tuple(TARGETS) else "",
            )
            if x
        )
        rows.append(
            [
                f"`{r.name}`",
                image,
                r.workload,
                "; ".join(ports) or "—",
                ", ".join(nets),
                caps,
                extra,
            ]
        )
    lines += _table(
        ["role", "image", "runs as", "ports", "networks", "capabilities", "notes"], rows
    )
    lines += ["## Labels", ""]
    lines += _table(["label", "on, and what it says"], [[f"`{k}`", v] for k, v in LABELS.items()])
    return "\n".join(lines).rstrip() + "\n"


def _exporter(root: Path) -> Any:
    path = root / "images" / "exporter" / "slurm_exporter.py"
    spec = importlib.util.spec_from_file_location("slurm_exporter", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metrics_page(root: Path) -> str:
    from slurmforge import versions
    from slurmforge.deploy import loader, monitoring

    exporter = _exporter(root)
    lines = ["# Metrics and alert rules", ""]
    lines += [
        "What the exporter (`images/exporter/slurm_exporter.py`) serves at `/metrics` to a scrape "
        "that presents the cluster's metrics token, and the alert rules Prometheus evaluates on "
        "them ([Metrics and alerts](../how-to/metrics.md) says how to use them). " + GENERATED,
        "",
    ]
    groups = [
        ("Nodes", "NODE_FAMILIES"),
        ("Jobs and partitions", "JOB_FAMILIES"),
        ("The scheduler", "SCHEDULER_FAMILIES"),
        ("Accounting (per job, over `metrics.usage_window`)", "ACCOUNTING_FAMILIES"),
        ("GPUs (the GPU nodes' collector)", "GPU_FAMILIES"),
    ]
    for title, name in groups:
        rows = []
        for metric, spec in getattr(exporter, name).items():
            doc, labels, *kind = spec
            rows.append([f"`{metric}`", "counter" if kind else "gauge", _code(labels), doc])
        lines += [f"## {title}", "", *_table(["metric", "type", "labels", "what"], rows)]
    lines += ["## The exporter itself", ""]
    lines += _table(
        ["metric", "type", "labels", "what"],
        [
            ["`slurm_up`", "gauge", "—", "1 when slurmctld answered"],
            [
                "`slurm_exporter_collector_success`",
                "gauge",
                "`collector`",
                "1 when a collector's source answered",
            ],
            [
                "`slurm_exporter_collector_seconds`",
                "gauge",
                "`collector`",
                "how long a collector took",
            ],
        ],
    )
    cluster = loader.load(root / "deploy" / "cluster.yaml", versions.load(root / "versions.yaml"))
    rows = []
    for group in monitoring.rules(cluster)["groups"]:
        for rule in group["rules"]:
            rows.append(
                [
                    f"`{rule['alert']}`",
                    f"`{rule['expr']}`",
                    rule.get("for", "0m"),
                    rule["labels"]["severity"],
                    rule["annotations"]["summary"],
                ]
            )
    lines += ["## Alert rules", ""]
    lines += [
        "As the shipped cluster file sets them (`metrics.pending_alert_after` changes the pending "
        "job's threshold); the same rules go into the local Prometheus and the PrometheusRule.",
        "",
    ]
    lines += _table(["alert", "fires when", "for", "severity", "summary"], rows)
    return "\n".join(lines).rstrip() + "\n"


def files_page(root: Path) -> str:
    lines = ["# Files a deploy writes", ""]
    lines += [
        "What `invoke deploy` writes, where, and which roles read it. Generated files go under "
        "`deploy/out/<target>/<cluster>/` (`--out DIR`: under `DIR`); secrets under the state "
        "directory (`$SLURMFORGE_STATE_DIR/<cluster>/`, else "
        "`$XDG_STATE_HOME/slurmforge/<cluster>/`, else "
        "`~/.local/state/slurmforge/<cluster>/`), made at the first deploy and reused; on "
        "Kubernetes each secret is a Secret and each config directory a ConfigMap or Secret of "
        "the namespace. " + GENERATED,
        "",
    ]

    def readers(attr: str, item: object) -> str:
        return _code(r.name for r in roles.ROLES if item in (getattr(r, attr) or ()))

    lines += ["## Secrets: the munge key, the JWT key, passwords and tokens", ""]
    lines += [
        "Locally each is a file of mode 0400 (0440 with the group named) in a directory of mode "
        "0700, bound read-only at `/run/secrets/<file>` into the roles that read it; on "
        "Kubernetes a Secret of one key mounted read-only in the directory shown.",
        "",
    ]
    rows = []
    for s in roles.SECRETS.values():
        made = f"{s.size} random bytes" + (" (text)" if s.text else "")
        if isinstance(s, roles.CertificateSecret):
            made = "a self-signed certificate and key (or `portal.tls_pem`)"
        group = f"group {s.group}" if s.group else "root only"
        only = _when(s.when)
        rows.append(
            [
                f"`{s.file}`",
                f"`{s.secret}`",
                f"`{s.path}`",
                made,
                group,
                readers("secrets", s),
                only or "always",
            ]
        )
    lines += _table(
        ["file", "Kubernetes Secret", "path in pods", "made as", "readable by", "read by", "when"],
        rows,
    )
    lines += ["## Generated configuration", ""]
    rows = [
        [
            f"`{c.local}/`",
            f"`{c.name}`",
            f"`{c.path}`",
            readers("configs", c),
            _when(c.when) or "always",
        ]
        for c in roles.CONFIGS
    ]
    lines += _table(
        ["under the output directory", "Kubernetes object", "mounted at", "read by", "when"], rows
    )
    lines += ["## Data", ""]
    data = {r.data for r in roles.ROLES if r.data is not None}
    rows = [
        [
            f"`{d.path}`",
            f"`<cluster>_{d.local}`",
            f"`{d.claim}`",
            f"`kubernetes.{d.setting}`",
            _code(r.name for r in roles.ROLES if r.data == d),
        ]
        for d in sorted(data, key=lambda d: d.path)
    ]
    lines += _table(
        ["path in the container", "Compose volume", "claim", "size and class from", "role"], rows
    )
    lines += [
        "The jail itself is the volume `<cluster>_jail` (Kubernetes: a ReadWriteMany claim, "
        "`kubernetes.jail`), which `invoke jail-populate` and every deploy fill from the `jail` "
        "image, keeping users' state ([the jail](../explanation/jail.md)).",
        "",
    ]
    return "\n".join(lines).rstrip() + "\n"
