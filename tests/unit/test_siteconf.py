"""A site's own configuration in the cluster file: the parameter lists the controller image
carries (images/slurm-debs/conf-keys, run here on Slurm's real sources from the mirror), the
checks made against them, and what the settings, scripts, mounts and topology render to on both
targets."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest

from slurmforge.deploy import loader
from slurmforge.deploy.k8s import images as k8s_images
from slurmforge.deploy.k8s import render as k8s_render
from slurmforge.deploy.local import render as local_render
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.deploy.slurm import siteconf
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.common import ROOT, load_yaml, slurm_files
from tests.unit.helpers import assert_clean_failure, run_invoke, shipped_with

SHIPPED = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())
CONF_KEYS = ROOT / "images" / "slurm-debs" / "conf-keys"
PARSERS = ("src/common/read_config.c", "src/interfaces/cgroup.c", "src/slurmdbd/read_config.c")
_keys: dict[str, siteconf.ConfKeys] = {}


def conf_keys(tmp_path: Path, tag: str) -> siteconf.ConfKeys:
    """What the controller image of Slurm ``tag`` carries: conf-keys run on that tag's parsers."""
    slurm = ".".join(tag.split("-")[1:4])  # slurm-24-05-8-1 → 24.05.8
    if tag not in _keys:
        src = slurm_files(tag, PARSERS, tmp_path / tag / "src")
        out = tmp_path / tag / "keys"
        subprocess.run(["sh", str(CONF_KEYS), str(src), str(out)], check=True)
        _keys[tag] = siteconf.ConfKeys.from_dir(slurm, out)
    return _keys[tag]


@pytest.fixture
def keys(tmp_path: Path) -> siteconf.ConfKeys:
    return conf_keys(tmp_path, "slurm-24-05-8-1")


def load(write_cluster, **changes) -> Cluster:
    data = copy.deepcopy(SHIPPED)
    data.update(changes)
    return loader.load(write_cluster(data), load_versions(ROOT / "versions.yaml"))


@pytest.mark.parametrize(
    "tag", ["slurm-23-11-11-1", "slurm-24-05-8-1", "slurm-25-11-7-1", "slurm-26-05-3-1"]
)
def test_conf_keys_lists_what_each_slurm_parses(tmp_path: Path, tag: str) -> None:
    keys = conf_keys(tmp_path, tag)
    assert {"schedulerparameters", "maxarraysize", "selecttypeparameters"} <= set(
        keys.tables["slurm.conf"]
    )
    assert keys.tables["slurm.conf"]["schedulerparameters"] == "SchedulerParameters"
    assert {"weight", "tmpdisk", "cpus"} <= set(keys.tables["node"])
    assert {"prioritytier", "qos", "allowaccounts"} <= set(keys.tables["partition"])
    assert {"constraincores", "allowedramspace"} <= set(keys.tables["cgroup.conf"])
    assert {"purgejobafter", "storagehost"} <= set(keys.tables["slurmdbd.conf"])
    # the man page's values and sub-options are no parameters
    assert not {"all", "any", "cancel"} & set(keys.tables["slurm.conf"])


def test_conf_keys_refuses_a_tree_without_the_tables(tmp_path: Path) -> None:
    (tmp_path / "src" / "src" / "common").mkdir(parents=True)
    (tmp_path / "src" / "src" / "common" / "read_config.c").write_text("int x;\n")
    proc = subprocess.run(
        ["sh", str(CONF_KEYS), str(tmp_path / "src"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "no table slurm_conf_options" in proc.stderr


def test_site_settings_replace_ours_and_extend_the_node_and_partition_lines(
    write_cluster, keys
) -> None:
    nodesets = [{**SHIPPED["nodesets"][0], "slurm": {"Weight": 10, "TmpDisk": 1000}}]
    partitions = [{**SHIPPED["partitions"][0], "slurm": {"PriorityTier": 2, "DefMemPerCPU": 500}}]
    cluster = load(
        write_cluster,
        slurm={
            "conf": {"SchedulerParameters": "bf_interval=5", "SlurmdParameters": "x", "X": 1},
            "override": ["SlurmdParameters"],
        },
        nodesets=nodesets,
        partitions=partitions,
    )
    with pytest.raises(ConfigError, match=r"slurm\.conf\.X: Slurm 24\.05\.8 takes no slurm\.conf"):
        siteconf.check(cluster, keys)
    cluster = load(
        write_cluster,
        slurm={
            "conf": {
                "SchedulerParameters": "bf_interval=5",
                "slurmdparameters": "config_overrides,l3cache_as_socket",
                "EnforcePartLimits": True,
            },
            "override": ["SlurmdParameters"],
        },
        nodesets=nodesets,
        partitions=partitions,
    )
    siteconf.check(cluster, keys)
    conf = slurmconf.render(cluster)["slurm.conf"]
    lines = conf.splitlines()
    assert [ln for ln in lines if ln.lower().startswith("schedulerparameters=")] == [
        "SchedulerParameters=bf_interval=5"
    ]
    assert [ln for ln in lines if ln.lower().startswith("slurmdparameters=")] == [
        "slurmdparameters=config_overrides,l3cache_as_socket"
    ]
    assert "EnforcePartLimits=YES" in lines
    assert (
        "NodeName=cpu-[0-1] CPUs=1 RealMemory=1024 Features=cpu,small State=UNKNOWN "
        "Weight=10 TmpDisk=1000" in lines
    )
    # the site's DefMemPerCPU replaces the one slurmforge derives
    assert (
        "PartitionName=main Nodes=cpu-[0-1] Default=YES MaxTime=INFINITE State=UP "
        "PriorityTier=2 DefMemPerCPU=500" in lines
    )


@pytest.mark.parametrize(
    ("slurm", "nodesets", "said"),
    [
        (
            {"conf": {"AuthType": "auth/none"}},
            None,
            r"slurm\.conf\.AuthType: slurmforge manages AuthType \(authentication",
        ),
        (
            {"cgroup_conf": {"ignoresystemd": "no"}},
            None,
            r"slurm\.cgroup_conf\.ignoresystemd: slurmforge manages IgnoreSystemd",
        ),
        (
            {"slurmdbd_conf": {"StorageHost": "db"}},
            None,
            r"slurm\.slurmdbd_conf\.StorageHost: slurmforge manages",
        ),
        (
            {"conf": {"PrivateData": "cloud"}},
            None,
            r"slurm\.conf\.PrivateData: slurmforge manages PrivateData \(slurm\.private_data",
        ),
        (
            {"slurmdbd_conf": {"privatedata": "jobs"}},
            None,
            r"slurm\.slurmdbd_conf\.privatedata: slurmforge manages PrivateData",
        ),
        (
            {"cgroup_conf": {"ConstrainCore": "no"}},
            None,
            r"takes no cgroup\.conf parameter 'ConstrainCore'; did you mean ConstrainCores\?",
        ),
        (
            {},
            {"CPUs": 4},
            r"nodesets\[0\]\.slurm\.CPUs: slurmforge manages CPUs \(the node set's cpus:\)",
        ),
        (
            {},
            {"Wieght": 4},
            r"nodesets\[0\]\.slurm\.Wieght: Slurm 24\.05\.8 takes no NodeName line parameter "
            r"'Wieght'; did you mean Weight\?",
        ),
        (
            {"conf": {"NodeName": "x"}, "override": ["NodeName"]},
            None,
            r"slurm\.conf\.NodeName: NodeName cannot be set here \(node sets are declared",
        ),
        (
            {"conf": {"MaxArraySize": 9, "maxarraysize": 10}},
            None,
            r"slurm\.conf\.maxarraysize: set twice",
        ),
        (
            {"conf": {"MaxArraySize": 9}, "override": ["MaxArraySize"]},
            None,
            r"slurm\.override\[0\]: 'MaxArraySize' is not a key slurmforge manages",
        ),
        (
            {"override": ["AuthType"]},
            None,
            r"slurm\.override\[0\]: 'AuthType' is not a key slurmforge manages that the "
            r"cluster file sets",
        ),
    ],
)
def test_unknown_and_managed_keys_are_refused_with_the_file_and_key(
    write_cluster, keys, slurm, nodesets, said
) -> None:
    changes = {"slurm": slurm}
    if nodesets:
        changes["nodesets"] = [{**SHIPPED["nodesets"][0], "slurm": nodesets}]
    cluster = load(write_cluster, **changes)
    with pytest.raises(ConfigError, match=said) as caught:
        siteconf.check(cluster, keys)
    assert str(cluster.path) in str(caught.value)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (
            {"mounts": [{"path": "/usr/data", "host_path": "/srv"}]},
            r"mounts\[0\]\.path: expected a directory outside / and the jail's system",
        ),
        ({"mounts": [{"path": "/jail/x", "host_path": "/srv"}]}, r"mounts\[0\]\.path"),
        (
            {"mounts": [{"path": "/data", "host_path": "/srv", "claim": "data"}]},
            r"mounts\[0\]: .*exactly one of host_path and claim",
        ),
        (
            {"mounts": [{"path": "/scratch/in", "host_path": "/srv"}]},
            r"mounts\[0\]\.path: /scratch/in overlaps jail\.scratch\[0\]",
        ),
        (
            {"mounts": [{"path": "/d", "host_path": "/a"}, {"path": "/d/e", "host_path": "/b"}]},
            r"mounts\[1\]\.path: /d/e overlaps mounts\[0\]\.path",
        ),
        (
            {"mounts": [{"path": "/d/../etc", "host_path": "/a"}]},
            r"mounts\[0\]\.path: expected a plain absolute path",
        ),
        (
            {"slurm": {"prolog": ["missing.sh"]}},
            r"slurm\.prolog\[0\]: expected a script file next to the cluster file",
        ),
        (
            {"slurm": {"prolog": ["plain.txt"]}},
            r"slurm\.prolog\[0\]: expected a script of at most 1 MiB that starts with '#!'",
        ),
        (
            {"slurm": {"conf": {"SchedulerParameters": "a#b"}}},
            r"slurm\.conf\.SchedulerParameters: .*without '#'",
        ),
        (
            {"topology": {"tree": [{"name": "s", "nodesets": ["gpu"]}]}},
            r"topology\.tree\[0\]\.nodesets\[0\]: unknown node set 'gpu'",
        ),
        (
            {"topology": {"tree": [{"name": "s", "switches": ["t"]}]}},
            r"topology\.tree\[0\]\.switches\[0\]: 't' is not another switch",
        ),
        ({"topology": {}}, r"topology: .*exactly one of tree, block and labels"),
        (
            {"accounting": {"accounts": [{"name": "phys", "QOS": ["gold"]}]}},
            r"accounting\.accounts\[0\]\.QOS\[0\]: unknown QoS 'gold'",
        ),
        (
            {"accounting": {"qos": [{"name": "a", "MaxTRESPerUser": "cpus"}]}},
            r"accounting\.qos\[0\]\.MaxTRESPerUser",
        ),
        (
            {"accounting": {"qos": [{"name": "a", "MaxTresPerUser": "cpu=1"}]}},
            r"accounting\.qos\[0\]\.MaxTresPerUser",
        ),
        (
            {"accounting": {"qos": [{"name": "broken", "MaxTRESPerUser": "cpu=1,gres/tpu=4"}]}},
            r"accounting\.qos\[0\]\.MaxTRESPerUser: unknown TRES 'gres/tpu'; this cluster "
            r"tracks billing, cpu, energy, fs/disk, mem, node, pages, vmem$",
        ),
        (
            {"accounting": {"qos": [{"name": "a", "GrpTRES": "memory=4G"}]}},
            r"accounting\.qos\[0\]\.GrpTRES: unknown TRES 'memory'; did you mean 'mem'\?",
        ),
        (
            {"accounting": {"accounts": [{"name": "phys", "GrpTRES": "license/matlab=2"}]}},
            r"accounting\.accounts\[0\]\.GrpTRES: unknown TRES 'license/matlab'",
        ),
        (
            {"accounting": {"qos": [{"name": "a", "Preempt": ["a"]}]}},
            r"accounting\.qos\[0\]\.Preempt: QoS preempt each other in a loop \(a -> a\)",
        ),
        (
            {"accounting": {"accounts": [{"name": "a", "Parent": "a"}]}},
            r"accounting\.accounts\[0\]\.Parent: accounts are each other's parents in a loop "
            r"\(a -> a\); an account tree starts at root$",
        ),
        (
            {
                "accounting": {
                    "accounts": [
                        {"name": "phys"},
                        {"name": "a", "Parent": "b"},
                        {"name": "b", "Parent": "a"},
                    ]
                }
            },
            r"accounting\.accounts\[[12]\]\.Parent: accounts are each other's parents in a loop "
            r"\((a -> b -> a|b -> a -> b)\)",
        ),
        (
            {
                "accounting": {
                    "qos": [
                        {"name": "a", "Preempt": ["b"]},
                        {"name": "b", "Preempt": ["c"]},
                        {"name": "c", "Preempt": ["a"]},
                    ]
                }
            },
            r"accounting\.qos\[0\]\.Preempt: .* loop \(a -> b -> c -> a\)",
        ),
        (
            {"accounting": {"qos": [{"name": "small"}, {"name": "big"}, {"name": "small"}]}},
            r"accounting\.qos\[2\]\.name: 'small' is accounting\.qos\[0\] already",
        ),
        (
            {"accounting": {"accounts": [{"name": "phys"}, {"name": "phys", "QOS": ["normal"]}]}},
            r"accounting\.accounts\[1\]\.name: 'phys' is accounting\.accounts\[0\] already",
        ),
    ],
)
def test_bad_site_input_is_refused_when_the_file_is_read(
    write_cluster, tmp_path: Path, changes, said
) -> None:
    (tmp_path / "plain.txt").write_text("echo no interpreter line\n")
    with pytest.raises(ConfigError, match=said):
        load(write_cluster, **changes)


def test_block_sizes_need_slurm_24_05(write_cluster, tmp_path: Path) -> None:
    topology = {"block": [{"name": "b0", "nodesets": ["cpu"]}], "block_sizes": [2]}
    cluster = load(write_cluster, topology=topology)
    assert slurmconf.render(cluster)["topology.conf"].splitlines()[1:] == [
        "BlockName=b0 Nodes=cpu-[0-1]",
        "BlockSizes=2",
    ]
    with pytest.raises(ConfigError, match=r"topology\.block_sizes: Slurm 23\.11\.11 has no"):
        load(
            write_cluster,
            topology=topology,
            images={"set": "ci", "cell": "23.11.11-cuda12.2.2-debian12"},
        )


def test_scripts_run_in_the_files_order_and_are_programs(write_cluster, tmp_path: Path) -> None:
    for name in ("a.sh", "b.sh", "c.sh"):
        (tmp_path / name).write_text(f"#!/bin/sh\necho {name}\n")
    cluster = load(write_cluster, slurm={"prolog": ["b.sh", "a.sh"], "epilog": ["c.sh"]})
    files = slurmconf.render(cluster)
    scripts = sorted((n for n in files if n.startswith(("prolog-", "epilog-"))), reverse=True)
    # Slurm runs what a pattern matches in reverse alphabetical order
    assert scripts == ["prolog-01-b.sh", "prolog-00-a.sh", "epilog-00-c.sh"]
    assert "Prolog=/etc/slurm/prolog-*" in files["slurm.conf"].splitlines()
    assert "Epilog=/etc/slurm/epilog-*" in files["slurm.conf"].splitlines()
    node_dir, jail_dir = tmp_path / "etc", tmp_path / "jail"
    slurmconf.write(cluster, node_dir, jail_dir)
    assert (node_dir / "prolog-01-b.sh").stat().st_mode & 0o777 == 0o755
    assert (node_dir / "slurm.conf").stat().st_mode & 0o777 == 0o644
    assert not (jail_dir / "prolog-01-b.sh").exists()
    # a script left out of the file is removed by the next render (and nothing else)
    (node_dir / "site-notes.txt").write_text("mine")
    slurmconf.write(load(write_cluster, slurm={"prolog": ["a.sh"]}), node_dir, jail_dir)
    assert sorted(
        p.name for p in node_dir.iterdir() if p.name.startswith(("prolog", "epilog", "site"))
    ) == [
        "prolog-00-a.sh",
        "site-notes.txt",
    ]


def test_mounts_land_in_the_jail_of_login_and_nodes_on_both_targets(write_cluster) -> None:
    mounts = [
        {"path": "/datasets", "host_path": "/srv/datasets", "read_only": True},
        {"path": "/projects", "claim": "projects"},
    ]
    cluster = load(write_cluster, mounts=mounts)
    assert cluster.spec.kept[-2:] == ("/datasets", "/projects")  # populate leaves them alone
    local = load(write_cluster, mounts=mounts[:1])
    services = local_render.render(
        local,
        {n: Path(f"/{n}") for n in ("munge.key", "jwt_hs256.key", "db-password", "metrics-token")},
        "sha256:0",
    )["services"]
    for name in ("login", "cpu-0", "cpu-1"):
        assert "/srv/datasets:/jail/datasets:ro" in services[name]["volumes"], name
    assert not any("datasets" in v for v in services["slurmctld"]["volumes"])
    images = k8s_images.Images(dict(cluster.images), "sha256:0")
    objects = k8s_render.ManifestRenderer(cluster, images, "ns").render(pyxis=False)
    pod = objects["statefulset-cpu.yaml"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["site-0"]["hostPath"] == {"path": "/srv/datasets", "type": "Directory"}
    assert volumes["site-1"]["persistentVolumeClaim"] == {"claimName": "projects"}
    mounts_of = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts_of["site-0"] == {
        "name": "site-0",
        "mountPath": "/jail/datasets",
        "readOnly": True,
    }
    assert mounts_of["site-1"]["mountPath"] == "/jail/projects"
    login = objects["statefulset-login.yaml"]["spec"]["template"]["spec"]
    assert {"site-0", "site-1"} <= {v["name"] for v in login["volumes"]}
    ctld = objects["statefulset-slurmctld.yaml"]["spec"]["template"]["spec"]
    assert not {"site-0", "site-1"} & {v["name"] for v in ctld["volumes"]}


def test_site_settings_do_not_roll_k8s_pods_but_reach_their_configmap(
    write_cluster, tmp_path
) -> None:
    (tmp_path / "p.sh").write_text("#!/bin/sh\n")

    def render(**changes):
        cluster = load(write_cluster, **changes)
        images = k8s_images.Images(dict(cluster.images), "sha256:0")
        return k8s_render.ManifestRenderer(cluster, images, "ns").render(pyxis=False)

    plain = render()
    tuned = render(
        slurm={"conf": {"SchedulerParameters": "bf_interval=9"}, "prolog": ["p.sh"]},
        topology={"tree": [{"name": "s0", "nodesets": ["cpu"]}]},
    )

    def annotations(objects):
        return {
            n: o["spec"]["template"]["metadata"].get("annotations")
            for n, o in objects.items()
            if o["kind"] == "StatefulSet"
        }

    assert annotations(plain) == annotations(tuned)
    data = tuned["configmap-slurm-config.yaml"]["data"]
    assert "SchedulerParameters=bf_interval=9" in data["slurm.conf"].splitlines()
    assert {"prolog-00-p.sh", "topology.conf"} <= set(data)
    volume = next(
        v
        for v in tuned["statefulset-cpu.yaml"]["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "slurm-config"
    )
    assert volume["configMap"]["defaultMode"] == 0o755


def test_a_limit_may_name_every_tres_the_cluster_tracks(write_cluster) -> None:
    """Slurm's defaults, the node sets' GRES (typed too) and the declared licenses are tracked
    (AccountingStorageTRES), so sacctmgr knows each; a site's own list replaces ours."""
    nodesets = [
        {"name": "cpu", "definitions": ["cpu-small"], "replicas": 1},
        {"name": "fpga", "definitions": ["cpu-small"], "replicas": 1, "gres": ["fpga:xl:2"]},
    ]
    limits = "cpu=4,mem=8G,node=2,billing=10,fs/disk=1,gres/fpga=1,gres/fpga:xl=1,license/matlab=1"
    cluster = load(
        write_cluster,
        nodesets=nodesets,
        partitions=[{"name": "main", "nodesets": ["cpu", "fpga"], "default": True}],
        slurm={"conf": {"Licenses": "matlab:10,ansys*2"}},
        accounting={"qos": [{"name": "big", "GrpTRES": limits}]},
    )
    conf = slurmconf.render(cluster)["slurm.conf"].splitlines()
    tracked = "AccountingStorageTRES=gres/fpga,gres/fpga:xl,license/matlab,license/ansys"
    assert tracked in conf
    # the site's own list is what Slurm tracks then
    with pytest.raises(ConfigError, match=r"unknown TRES 'gres/fpga'"):
        load(
            write_cluster,
            nodesets=nodesets,
            partitions=[{"name": "main", "nodesets": ["cpu", "fpga"], "default": True}],
            slurm={"conf": {"AccountingStorageTRES": "gres/gpu"}},
            accounting={"qos": [{"name": "big", "GrpTRES": "gres/fpga=1"}]},
        )
    gpu = load(
        write_cluster,
        slurm={"conf": {"AccountingStorageTRES": "gres/gpu"}},
        accounting={"qos": [{"name": "big", "GrpTRES": "gres/gpumem=1G,gres/gpuutil=1"}]},
    )
    assert "AccountingStorageTRES=gres/gpu" in slurmconf.render(gpu)["slurm.conf"].splitlines()
    # without accounting, no AccountingStorageTRES at all
    off = load(
        write_cluster,
        nodesets=nodesets,
        accounting={"enabled": False},
        rest={"enabled": False},
        partitions=[{"name": "main", "nodesets": ["cpu", "fpga"], "default": True}],
    )
    assert "AccountingStorageTRES" not in slurmconf.render(off)["slurm.conf"]


@pytest.mark.parametrize("kind", ["qos", "accounts"])
def test_a_name_declared_twice_writes_no_manifest(write_cluster, tmp_path: Path, kind) -> None:
    """sacctmgr would add the second after the cluster is up, and fail: refused first."""
    path = write_cluster(shipped_with(accounting={kind: [{"name": "small"}, {"name": "small"}]}))
    out = tmp_path / "out"
    proc = run_invoke(
        "deploy", "--target", "k8s", "--dry-run", "--cluster", str(path), "--out", str(out)
    )
    assert_clean_failure(proc, f"{path}: accounting.{kind}[1].name: 'small' is")
    assert not out.exists()
