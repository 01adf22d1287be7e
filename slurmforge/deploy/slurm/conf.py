"""Slurm's configuration files, generated from the deployment model.

Two directories come out: the nodes' (slurm.conf, cgroup.conf, plugstack.conf, gres.conf when a
node set has GRES) mounted at /etc/slurm in the daemons' containers, and the jail's client subset
(slurm.conf, plugstack.conf) bound onto the jail's /etc/slurm. Daemon-only files never enter it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from slurmforge import jail_contract, matrix
from slurmforge.deploy import roles
from slurmforge.deploy.roles import DATABASE, DBD
from slurmforge.deploy.slurm import fragments, siteconf
from slurmforge.deploy.slurm.hostlist import hostlist
from slurmforge.deploy.spec.health import SETTINGS as HEALTH_SETTINGS
from slurmforge.deploy.spec.model import Cluster, NodeSet, Partition, SlurmSpec

STATE_DIR = roles.CONTROLLER_STATE.path
SLURM_CONF_DIR = roles.SLURM_CONF.path
SPOOL_DIR = "/var/spool/slurmd"
# elastic node sets: slurmctld's ResumeProgram and SuspendProgram are <this>-resume, -suspend
POWER_PROGRAM = f"{SLURM_CONF_DIR}/power"
# with a backup controller: what each runs when it takes control (SlurmctldPrimaryOnProg)
PRIMARY_ON = f"{SLURM_CONF_DIR}/primary-on"
# how long it watches for jobs a dead predecessor left holding nodes (templates/primary-on.j2):
# a node's word of a job's end waits for a controller in control, and reaches a new one seconds
# after it takes control; minutes on a loaded host
PRIMARY_ON_WATCH = 600
PYXIS_PLUGIN = "/usr/lib/slurmforge/spank/pyxis.so"  # slurmforge-pyxis, when built
# node-local container roots, per user (images/gpu/enroot.conf; created by enroot_install)
ENROOT_LOCAL = "/var/lib/slurmforge/enroot"
JWT_KEY = "/var/lib/slurm/jwt_hs256.key"  # where images/accounting/jwt-key.sh installs it
NODE_FILES = ("slurm.conf", "cgroup.conf", "plugstack.conf")
JAIL_FILES = ("slurm.conf", "plugstack.conf", "slurmforge.conf")

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("slurmforge.deploy.slurm", "templates"),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def cgroup_disabled(slurm: str) -> bool:
    """``CgroupPlugin=disabled`` exists from Slurm 24.05 on."""
    return matrix.slurm_at_least(slurm, (24, 5))


@dataclass(frozen=True)
class Network:
    """How daemons find each other where a host name alone does not resolve (Kubernetes pods)."""

    # each slurmctld's host name (what `hostname -s` says in its pod) and a resolvable name for
    # it, the primary first
    controllers: tuple[tuple[str, str], ...]
    node_domain: str  # node N is reached at N.<node_domain>
    dbd_addr: str = DBD  # where slurmctld reaches slurmdbd


def slurmdbd_conf(cluster: Cluster, dbd_host: str = DBD) -> str:
    """slurmdbd.conf without its StoragePass (the image adds that at start from the password
    file, so no generated file ever holds it). ``dbd_host``: what `hostname -s` says there."""
    db = cluster.spec.accounting.database
    text = _env.get_template("slurmdbd.conf.j2").render(
        name=cluster.name,
        source=cluster.path.name,
        slurm=cluster.cell.slurm,
        dbd_host=dbd_host,
        jwt_key=JWT_KEY,
        storage_host=db.host if db else DATABASE,
        storage_port=db.port if db else 3306,
        storage_user=db.user if db else roles.OWN_DB_USER,
        storage_loc=db.name if db else roles.OWN_DB_NAME,
        private_data=cluster.spec.slurm.private_data,
    )
    return siteconf.merge(text, cluster.spec.slurm.slurmdbd_conf, "slurm.slurmdbd_conf")


def render(
    cluster: Cluster,
    gres_files: dict[str, list[str]] | None = None,
    pyxis: bool = False,
    network: Network | None = None,
    site: bool = True,
) -> dict[str, str]:
    """File name → content for the nodes' /etc/slurm (and gres.conf when needed).

    ``gres_files``: node → the GPU device nodes it was given (gres.conf names them as File=).
    ``pyxis``: the images carry pyxis, so plugstack.conf loads it.
    ``network``: name the controller's and every node's address (else host names resolve).
    ``site``: with the cluster file's own settings, scripts and topology (all of which a running
    cluster takes with `scontrol reconfigure`); False: slurmforge's part alone.
    """
    spec = cluster.spec
    nodesets = [
        {
            "name": ns.name,
            # one line per node when each needs its own NodeAddr; an elastic node's is the
            # address it registers from (cloud_reg_addrs), since Slurm resets a powered-down
            # node's address to its bare name
            "lines": [f"{n} NodeAddr={n}.{network.node_domain}" for n in names]
            if network and state != "CLOUD"
            else [hostlist(names)],
            "attrs": siteconf.line_attrs(_node_attrs(ns, state), ns.slurm if site else {}),
        }
        for ns in spec.nodesets
        for names, state in ((ns.fixed_nodes, "UNKNOWN"), (ns.elastic_nodes, "CLOUD"))
        if names
    ]
    partitions = [
        {
            "name": p.name,
            "attrs": siteconf.line_attrs(_partition_attrs(cluster, p), p.slurm if site else {}),
        }
        for p in spec.partitions
    ]
    scripts = scripts_of(cluster) if site else {}
    values = {
        "name": cluster.name,
        "source": cluster.path.name,
        "slurm": cluster.cell.slurm,
        # SlurmctldHost lines: (host name, its address when the name does not resolve)
        "controllers": network.controllers
        if network
        else [(host, None) for host in roles.controllers(spec)],
        "state_dir": STATE_DIR,
        "spool_dir": SPOOL_DIR,
        "spank_plugin": jail_contract.PLUGIN,
        "jail_args": jail_contract.plugin_args(SPOOL_DIR, ENROOT_LOCAL if pyxis else None),
        "pyxis_plugin": PYXIS_PLUGIN,
        "pyxis": pyxis,
        "nodesets": nodesets,
        "partitions": partitions,
        "cgroup_disabled": cgroup_disabled(cluster.cell.slurm),
        # each feature's fragment of slurm.conf (templates/slurm.conf.d/), by its name
        "failover": fragments.failover(cluster, PRIMARY_ON),
        "cgroups": spec.slurm.cgroups,
        "node_ssh": spec.slurm.node_ssh,
        "private_data": spec.slurm.private_data,
        "accounting": fragments.accounting(cluster, network.dbd_addr if network else DBD, JWT_KEY),
        "monitoring": fragments.monitoring(cluster),
        "power": fragments.power(cluster, network is None, POWER_PROGRAM),
        "gres": fragments.gres(cluster),
        "scripts": fragments.scripts(scripts, SLURM_CONF_DIR),
        "health": fragments.health(cluster),
        "topology": fragments.topology(cluster) if site else None,
    }
    files = {name: _env.get_template(f"{name}.j2").render(**values) for name in NODE_FILES}
    own = spec.slurm if site else SlurmSpec()
    files["slurm.conf"] = siteconf.merge(files["slurm.conf"], own.conf, "slurm.conf")
    files["cgroup.conf"] = siteconf.merge(
        files["cgroup.conf"], own.cgroup_conf, "slurm.cgroup_conf"
    )
    files.update(scripts)
    if values["health"]:
        files.update(_health_files(cluster, site))
    if site and spec.topology:
        files["topology.conf"] = _topology_conf(cluster)
    # what the jail's createuser reads (the account new users go under, their homes' mode), and
    # the umask that goes with that mode, which users' sessions take (profile.d, sshd's PAM)
    identity = spec.identity
    files["slurmforge.conf"] = (
        f"default_account={spec.accounting.default_account}\n"
        f"home_mode={identity.home_mode}\numask={identity.umask}\n"
    )
    if spec.controller.replicas > 1:
        files["primary-on"] = _env.get_template("primary-on.j2").render(
            name=cluster.name, watch=PRIMARY_ON_WATCH
        )
    if cluster.elastic:
        program = _env.get_template("power.j2").render(name=cluster.name, spool=roles.POWER_SPOOL)
        files.update({"power-resume": program, "power-suspend": program})
    if values["gres"]:
        files["gres.conf"] = _gres_conf(cluster, gres_files or {})
    return files


def _node_attrs(ns: NodeSet, state: str = "UNKNOWN") -> dict[str, str]:
    attrs = {"CPUs": str(ns.cpus), "RealMemory": str(ns.memory_mb)}
    if ns.features:
        attrs["Features"] = ",".join(ns.features)
    if ns.gres:
        attrs["Gres"] = ",".join(ns.gres)
    attrs["State"] = state
    return attrs


def _partition_attrs(cluster: Cluster, p: Partition) -> dict[str, str]:
    attrs = {"Nodes": _nodes_of(cluster, p.nodesets)}
    if p.default:
        attrs["Default"] = "YES"
    attrs["MaxTime"] = p.max_time
    attrs["DefMemPerCPU"] = str(def_mem_per_cpu(cluster, p.nodesets))
    elastic = [e for n in p.nodesets if (e := cluster.nodeset(n).elastic)]
    if elastic:  # one idle time and start timeout per partition (spec/checks.py)
        attrs["SuspendTime"] = str(elastic[0].idle)
        attrs["ResumeTimeout"] = str(elastic[0].start_timeout)
    attrs["State"] = "UP"
    return attrs


def scripts_of(cluster: Cluster) -> dict[str, str]:
    """The site's prolog and epilog scripts under the names /etc/slurm gives them: Slurm runs
    what ``prolog-*`` matches in reverse alphabetical order, so the first listed sorts last."""
    out = {}
    for kind in ("prolog", "epilog"):
        listed = getattr(cluster.spec.slurm, kind)
        for i, rel in enumerate(listed):
            path = cluster.path.parent / rel
            out[f"{kind}-{len(listed) - 1 - i:02d}-{path.name}"] = path.read_text()
    return out


def _health_files(cluster: Cluster, site: bool) -> dict[str, str]:
    """What the node health check reads beside slurm.conf: its settings, and (``site``) the
    site's checks, ``health-NN-<name>`` in the order it runs them."""
    health = cluster.spec.health
    settings = (
        f"# Generated by slurmforge for cluster {cluster.name}; node-health reads it.\n"
        f"max_used_percent={health.max_used_percent}\nresources={int(health.resources)}\n"
        f"min_driver={health.min_driver}\n"
    )
    files = {HEALTH_SETTINGS: settings}
    if site:
        checks = health.site_checks(cluster.path.parent)
        files.update(
            {f"health-{i:02d}-{name}": text for i, (name, text) in enumerate(checks.items())}
        )
    return files


def _topology_conf(cluster: Cluster) -> str:
    """topology.conf: a switch (or block) per entry, its nodes those of its node sets; from
    labels, every node in the unplaced switch or block (node-watch writes the rest on k8s)."""
    topology = cluster.spec.topology
    assert topology is not None
    lines = [f"# Generated by slurmforge from {cluster.path.name} for cluster {cluster.name}."]

    def nodes(names: tuple[str, ...]) -> str:
        return _nodes_of(cluster, names)

    for switch in topology.tree:
        parts = [f"SwitchName={switch.name}"]
        if switch.nodesets and nodes(switch.nodesets):
            parts.append(f"Nodes={nodes(switch.nodesets)}")
        if switch.switches:
            parts.append(f"Switches={','.join(switch.switches)}")
        lines.append(" ".join(parts))
    for block in topology.block:
        if nodes(block.nodesets):
            lines.append(f"BlockName={block.name} Nodes={nodes(block.nodesets)}")
    if topology.labels:  # where node-watch has placed none yet: all of them unplaced
        every = nodes(tuple(ns.name for ns in cluster.spec.nodesets))
        kind = "Switch" if topology.kind == "tree" else "Block"
        lines.append(f"{kind}Name={topology.labels.unplaced} Nodes={every}")
    if topology.block_sizes:
        lines.append(f"BlockSizes={','.join(str(s) for s in topology.block_sizes)}")
    return "\n".join(lines) + "\n"


def def_mem_per_cpu(cluster: Cluster, nodesets: tuple[str, ...]) -> int:
    """A partition's memory per CPU for jobs that give no --mem: its node sets' memory over CPUs,
    the smallest of them (so a job of N CPUs fits on any of its nodes)."""
    return min(cluster.nodeset(n).memory_mb // cluster.nodeset(n).cpus for n in nodesets)


def _nodes_of(cluster: Cluster, nodesets: tuple[str, ...]) -> str:
    """The nodes of ``nodesets`` as Slurm lists them (empty node sets left out)."""
    return ",".join(filter(None, (hostlist(cluster.nodeset(n).nodes) for n in nodesets)))


def _gres_conf(cluster: Cluster, gres_files: dict[str, list[str]]) -> str:
    lines = [f"# Generated by slurmforge for cluster {cluster.name}.", "AutoDetect=off"]
    for ns in cluster.spec.nodesets:
        if not ns.replicas:
            continue
        for gres in ns.gres:  # name[:type]:count
            name, *kind, count = gres.split(":")
            typed = f" Type={kind[0]}" if kind else ""
            if name == "gpu" and all(gres_files.get(n) for n in ns.nodes):
                for node in ns.nodes:  # each node its own device nodes
                    files = ",".join(gres_files[node])
                    lines.append(f"NodeName={node} Name=gpu{typed} File={files}")
            else:
                lines.append(f"NodeName={hostlist(ns.nodes)} Name={name}{typed} Count={count}")
    return "\n".join(lines) + "\n"


def write(
    cluster: Cluster,
    node_dir: Path,
    jail_dir: Path,
    gres_files: dict[str, list[str]] | None = None,
    pyxis: bool = False,
) -> None:
    files = render(cluster, gres_files, pyxis)
    for directory, names in ((node_dir, list(files)), (jail_dir, JAIL_FILES)):
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.iterdir():
            # only what an earlier render wrote (gres.conf once a cluster has no GPUs, a script
            # the cluster file no longer lists)
            if _rendered(stale.name) and stale.name not in names:
                stale.unlink()
        for name in names:
            _write_if_changed(directory / name, files[name], SCRIPT.match(name) is not None)


SCRIPT = re.compile(r"(prolog|epilog|health)-[0-9]{2}-|power-(resume|suspend)$|primary-on$")


def _rendered(name: str) -> bool:
    """A name that render gives one of its files."""
    fixed = (*NODE_FILES, *JAIL_FILES, "gres.conf", "topology.conf", HEALTH_SETTINGS)
    return name in fixed or SCRIPT.match(name) is not None


def _write_if_changed(path: Path, text: str, executable: bool = False) -> None:
    """In place (the daemons see the directory through a bind mount), only when it differs."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    mode = 0o755 if executable else 0o644
    if path.stat().st_mode & 0o777 != mode:
        path.chmod(mode)
