"""The deployment model, the Slurm configuration and the Compose file generated from it.

No Docker daemon here; the real Compose CLI's `config` checks the file offline.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurmforge import config, state
from slurmforge.deploy import loader
from slurmforge.deploy.commands import parse_scale
from slurmforge.deploy.local import render
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.common import ROOT, dump_yaml
from tests.unit.helpers import assert_clean_failure, run_invoke, secret_files, shipped_with


@pytest.fixture
def versions() -> config.Config:
    return load_versions(ROOT / "versions.yaml")


def test_shipped_cluster_resolves_its_layers(versions) -> None:
    cluster = loader.load(ROOT / "deploy" / "cluster.yaml", versions)
    (cpu,) = cluster.spec.nodesets
    assert (cpu.cpus, cpu.memory_mb, cpu.features) == (1, 1024, ("cpu", "small"))
    assert cpu.capabilities == ("SYS_ADMIN",)  # from the built-in base layer
    assert [n for _, n in cluster.nodes] == ["cpu-0", "cpu-1"]
    assert set(cluster.images) == {
        "slurmctld",
        "login",
        "jail",
        "slurmd",
        "slurmdbd",
        "slurmrestd",
        "mariadb",
        "exporter",
        "prometheus",
    }
    assert cluster.images["slurmd"].endswith("/slurmd:24.05.8-cuda12.2.2-debian12")


def test_scale_state_overrides_replicas(write_cluster, versions) -> None:
    path = write_cluster(shipped_with(name="scaled"))
    state.write_scale("scaled", {"cpu": 5})
    assert len(loader.load(path, versions, state.read_scale).nodes) == 5
    assert len(loader.load(path, versions, {"cpu": 3}).nodes) == 3


def test_a_deploy_says_when_the_scale_kept_is_not_the_files_replicas(write_cluster) -> None:
    """A user who edits replicas after `invoke scale` is told which count a deploy takes."""
    from slurmforge.deploy.commands import scale_notes
    from slurmforge.deploy.target import Where

    path = write_cluster(shipped_with(name="scaled"))
    where = Where(cluster_file=path, versions_file=ROOT / "versions.yaml", out_root=path.parent)
    assert scale_notes(where) == []
    state.write_scale("scaled", {"cpu": 5})
    assert scale_notes(where) == [
        "note: node set cpu: 5 nodes, as `invoke scale` set it, not the file's replicas: 2 "
        "(`invoke scale cpu=2` takes the file's)"
    ]
    state.write_scale("scaled", {"cpu": 2})
    assert scale_notes(where) == []


def test_loading_a_cluster_file_reads_no_state(write_cluster, versions) -> None:
    """The scale `invoke scale` kept is the caller's to give: loading reads the file alone."""
    path = write_cluster(shipped_with(name="scaled"))
    state.write_scale("scaled", {"cpu": 5})
    assert len(loader.load(path, versions).nodes) == 2  # the file's own count


@pytest.mark.parametrize(
    ("nodesets", "message"),
    [
        ([{"name": "cpu", "definitions": ["cpu-small"], "replicas": -1}], "replicas: Input should"),
        ([{"name": "cpu", "definitions": ["cpu-small"], "replicas": 1.5}], "nodesets[0].replicas"),
        ([{"name": "cpu", "definitions": ["cpu-small"], "replicas": "2"}], "nodesets[0].replicas"),
        ([{"name": "cpu", "definitions": ["gpu"], "image": "login"}], "no 'login' node image"),
        ([{"name": "cpu", "definitions": ["cpu-large"]}], "unknown layer 'cpu-large'"),
        ([{"name": "cpu", "definitions": ["cpu"]}], "layer cycle cpu → cpu"),
        ([{"name": "cpu", "replicas": 1}], "nodesets[0].image: required key is missing"),
        (
            [{"name": "cpu", "definitions": ["base"]}, {"name": "cpu", "definitions": ["base"]}],
            "nodesets[1].name: duplicate node set name 'cpu'",
        ),
        ([{"name": "slurmctld", "definitions": ["base"]}], "'slurmctld' is reserved"),
        # a GRES without its count (once a traceback: the count was unpacked before the check)
        ([{"name": "cpu", "definitions": ["base"], "gres": ["gpu"]}], "expected gpu[:type]:count"),
    ],
)
def test_bad_node_sets_are_refused(write_cluster, versions, nodesets, message: str) -> None:
    path = write_cluster(
        shipped_with(nodesets=nodesets, partitions=[{"name": "p", "nodesets": ["cpu"]}])
    )
    with pytest.raises(ConfigError) as exc:
        loader.load(path, versions)
    assert str(path) in exc.value.message
    assert message in exc.value.message


@pytest.mark.parametrize("path", ["/", "/etc/scratch", "/var/scratch", "/home/x", "/tmp", "rel"])
def test_scratch_must_be_where_jobs_can_write_output(write_cluster, versions, path) -> None:
    bad = write_cluster(shipped_with(jail={"scratch": [path]}))
    with pytest.raises(ConfigError, match=r"jail\.scratch\[0\]"):
        loader.load(bad, versions)


def test_scratch_is_made_by_login_and_kept_by_populate(write_cluster, versions, tmp_path) -> None:
    cluster = loader.load(
        write_cluster(shipped_with(jail={"keep": ["/srv/"], "scratch": ["/data/"]})), versions
    )
    assert cluster.spec.jail.scratch == ("/data",)
    services = render.render(cluster, secret_files(tmp_path), "sha256:abc")["services"]
    assert services["login"]["environment"] == {"SLURMFORGE_JAIL_SCRATCH": "/data"}
    assert services["jail-populate"]["environment"]["SLURMFORGE_JAIL_KEEP"] == "/srv/ /data"


def test_partition_must_name_known_node_sets(write_cluster, versions) -> None:
    path = write_cluster(shipped_with(partitions=[{"name": "p", "nodesets": ["gpu"]}]))
    with pytest.raises(ConfigError, match=r"partitions\[0\]\.nodesets\[0\]: unknown node set"):
        loader.load(path, versions)


@pytest.mark.parametrize("arg", ["cpu=-1", "cpu=two", "cpu=1.5", "cpu", "=3"])
def test_scale_argument_must_be_a_count(arg: str) -> None:
    with pytest.raises(ConfigError, match="scale"):
        parse_scale(arg)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["scale", "cpu=-1"], "node count must be an integer >= 0"),
        (["scale", "cpu=x"], "node count must be an integer >= 0"),
        (["deploy", "--target", "k9s"], "--target 'k9s': expected one of local, k8s"),
        (["scale", "cpu=3", "--timeout", "abc"], "--timeout 'abc': expected a number > 0"),
    ],
)
def test_cli_refuses_bad_deploy_input(args: list[str], expected: str) -> None:
    assert_clean_failure(run_invoke(*args), expected)


def test_cli_names_the_cluster_file_and_key(write_cluster) -> None:
    nodesets = [{"name": "cpu", "definitions": ["nope"], "replicas": 1}]
    path = write_cluster(shipped_with(nodesets=nodesets))
    proc = run_invoke("deploy", "--cluster", str(path))
    assert_clean_failure(proc, f"{path}: nodesets[0].definitions[0]: unknown layer 'nope'")


def test_hostlist() -> None:
    assert slurmconf.hostlist([]) == ""
    assert slurmconf.hostlist(["cpu-0"]) == "cpu-0"
    assert slurmconf.hostlist([f"cpu-{i}" for i in (0, 1, 2, 5, 7, 8)]) == "cpu-[0-2,5,7-8]"


def _two_sets(write_cluster, versions, slurm_cell: str | None = None):
    data = shipped_with(
        nodesets=[
            {"name": "cpu", "definitions": ["cpu-small"], "replicas": 3},
            {
                "name": "big",
                "definitions": ["cpu"],
                "cpus": 4,
                "gres": ["gpu:a100:2"],
                "image": "worker",
            },
            {"name": "off", "definitions": ["cpu"], "replicas": 0},
        ],
        partitions=[
            {"name": "main", "nodesets": ["cpu", "off"], "default": True},
            {"name": "all", "nodesets": ["cpu", "big"], "max_time": "1-00:00:00"},
        ],
    )
    return loader.load(write_cluster(data), versions)


def test_slurm_conf_comes_from_the_model(write_cluster, versions) -> None:
    files = slurmconf.render(_two_sets(write_cluster, versions))
    conf = files["slurm.conf"].splitlines()
    assert "NodeName=cpu-[0-2] CPUs=1 RealMemory=1024 Features=cpu,small State=UNKNOWN" in conf
    assert (
        "NodeName=big-[0-2] CPUs=4 RealMemory=1024 Features=cpu,small Gres=gpu:a100:2 State=UNKNOWN"
    ) in conf
    assert not [line for line in conf if line.startswith("NodeName=off")]
    # a job without --mem gets memory per CPU that fits it on any of the partition's nodes
    assert (
        "PartitionName=main Nodes=cpu-[0-2] Default=YES MaxTime=INFINITE DefMemPerCPU=1024 State=UP"
    ) in conf
    assert (
        "PartitionName=all Nodes=cpu-[0-2],big-[0-2] MaxTime=1-00:00:00 DefMemPerCPU=256 State=UP"
    ) in conf
    assert "SelectTypeParameters=CR_Core_Memory" in conf
    assert "ProctrackType=proctrack/cgroup" in conf
    assert "TaskPlugin=task/cgroup,task/affinity" in conf
    assert "MpiDefault=pmix" in conf  # a plain srun starts an MPI program
    assert "PrologEpilogTimeout=120" in conf  # a hung epilog drains its node, with the reason
    assert conf[3:5] == ["SlurmctldHost=slurmctld", "SlurmUser=slurm"]
    assert "GresTypes=gpu" in conf
    assert "StateSaveLocation=/var/spool/slurmctld" in conf
    assert "NodeName=big-[0-2] Name=gpu Type=a100 Count=2" in files["gres.conf"]
    cgroup = files["cgroup.conf"].splitlines()
    for line in ("CgroupPlugin=autodetect", "ConstrainCores=yes", "ConstrainRAMSpace=yes"):
        assert line in cgroup
    assert "ConstrainDevices=yes" in cgroup and "IgnoreSystemd=yes" in cgroup
    plug = files["plugstack.conf"]
    assert "required /usr/lib/slurmforge/spank/jail.so root=/jail" in plug
    assert "pyxis.so" not in plug and " local=" not in plug  # images without pyxis


def test_with_pyxis_the_jail_plugin_gives_containers_node_local_roots(
    write_cluster, versions
) -> None:
    """pyxis is loaded after the jail plugin (its tasks start containers inside the jail), and
    the jail plugin binds the node-local directory enroot.conf names for container roots."""
    plug = slurmconf.render(_two_sets(write_cluster, versions), pyxis=True)["plugstack.conf"]
    lines = [ln for ln in plug.splitlines() if ln.startswith("required ")]
    assert lines == [
        "required /usr/lib/slurmforge/spank/jail.so root=/jail conf=/etc/slurmforge/jail/slurm"
        " spool=/var/spool/slurmd local=/var/lib/slurmforge/enroot",
        "required /usr/lib/slurmforge/spank/pyxis.so container_scope=job",
    ]
    conf = (ROOT / "images/gpu/enroot.conf").read_text()
    assert f"l={slurmconf.ENROOT_LOCAL}/$(id -u)" in conf


@pytest.mark.parametrize(("slurm", "disabled"), [("23.11.6", False), ("24.05.3", True)])
def test_cgroup_plugin_follows_the_slurm_version(slurm: str, disabled: bool) -> None:
    assert slurmconf.cgroup_disabled(slurm) is disabled


OPEN = {"private_data": []}


@pytest.mark.parametrize(
    ("images", "metrics", "slurm", "served"),
    [
        ({"set": "default"}, {}, OPEN, False),  # 24.05: slurmctld has no metrics endpoint
        ({"set": "current", "cell": "25.11.7-cuda12.2.2-debian12"}, {}, OPEN, True),
        # with PrivateData (the default) slurmctld answers the endpoint 401 whoever asks
        ({"set": "current", "cell": "25.11.7-cuda12.2.2-debian12"}, {}, {}, False),
        (
            {"set": "current", "cell": "26.05.3-cuda12.2.2-debian12"},
            {"enabled": False},
            OPEN,
            False,
        ),
    ],
)
def test_slurmctld_serves_its_metrics_from_25_11_where_metrics_are_on_and_jobs_are_not_private(
    write_cluster, versions, images: dict, metrics: dict, slurm: dict, served: bool
) -> None:
    data = shipped_with(images=images, metrics=metrics, slurm=slurm)
    cluster = loader.load(write_cluster(data), versions)
    conf = slurmconf.render(cluster)["slurm.conf"].splitlines()
    assert ("MetricsType=metrics/openmetrics" in conf) is served


def test_without_cgroups_processes_are_tracked_through_proc(write_cluster, versions) -> None:
    data = shipped_with(slurm={"cgroups": False})
    files = slurmconf.render(loader.load(write_cluster(data), versions))
    conf = files["slurm.conf"].splitlines()
    assert "ProctrackType=proctrack/linuxproc" in conf and "TaskPlugin=task/affinity" in conf
    assert "SelectTypeParameters=CR_Core_Memory" in conf  # still scheduled
    assert "CgroupPlugin=disabled" in files["cgroup.conf"]  # the default cell is Slurm 24.11


def test_jail_gets_only_the_client_files(write_cluster, versions, tmp_path: Path) -> None:
    cluster = _two_sets(write_cluster, versions)
    slurmconf.write(cluster, tmp_path / "node", tmp_path / "jail")
    assert sorted(p.name for p in (tmp_path / "jail").iterdir()) == [
        "plugstack.conf",
        "slurm.conf",
        "slurmforge.conf",  # createuser's default account
    ]
    assert "gres.conf" in {p.name for p in (tmp_path / "node").iterdir()}


def test_compose_file_grants_least_privilege(write_cluster, versions, tmp_path: Path) -> None:
    cluster = _two_sets(write_cluster, versions)
    data = render.render(cluster, secret_files(tmp_path), "sha256:abc")
    services = data["services"]
    assert set(services) == {
        "slurmctld",
        "login",
        "jail-populate",
        "slurmdbd",
        "mariadb",
        "slurmrestd",
        "exporter",
        "prometheus",
        *(f"{ns}-{i}" for ns in ("cpu", "big") for i in range(3)),
    }
    text = dump_yaml(data)
    assert "privileged" not in text
    assert "cap_add" not in services["slurmctld"]
    assert "cap_add" not in services["jail-populate"]
    assert services["login"]["cap_add"] == ["SYS_ADMIN"]
    # SYS_NICE: slurmstepd binds tasks that already run as their user to their CPUs
    assert services["cpu-0"]["cap_add"] == ["SYS_ADMIN", "SYS_NICE"]
    # compute nodes start users' containers (pivot_root in a user namespace): no seccomp filter
    assert services["cpu-0"]["security_opt"] == ["apparmor:unconfined", "seccomp:unconfined"]
    assert services["login"]["security_opt"] == ["apparmor:unconfined"]
    assert "security_opt" not in services["slurmctld"]
    # the exporter holds only what starting munged and becoming its account takes; Prometheus
    # nothing; neither can gain more
    exporter, prometheus = services["exporter"], services["prometheus"]
    assert exporter["cap_drop"] == prometheus["cap_drop"] == ["ALL"]
    assert exporter["cap_add"] == ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]
    assert "cap_add" not in prometheus
    assert exporter["security_opt"] == prometheus["security_opt"] == ["no-new-privileges:true"]
    assert services["cpu-0"]["hostname"] == "cpu-0"
    key_mounts = [v for s in services.values() for v in s["volumes"] if "munge.key" in v]
    assert key_mounts and all(v.endswith(":/run/secrets/munge.key:ro") for v in key_mounts)
    # the accounting secrets reach only the services that use them, read-only, as files
    for name, holders in (
        ("jwt_hs256.key", {"slurmctld", "slurmdbd"}),
        ("db-password", {"slurmdbd", "mariadb"}),
    ):
        mount = f"{tmp_path / name}:/run/secrets/{name}:ro"
        assert {n for n, s in services.items() if mount in s.get("volumes", [])} == holders
    # no secret travels in the environment, not even where a secret file is
    values = [str(v) for s in services.values() for v in s.get("environment", {}).values()]
    assert not any("secret" in v or str(tmp_path) in v for v in values), values
    assert "environment" not in services["mariadb"] and "environment" not in services["slurmrestd"]
    for service in ("slurmdbd", "mariadb", "slurmrestd"):
        assert "cap_add" not in services[service] and "security_opt" not in services[service]
    assert services["slurmrestd"]["ports"] == ["127.0.0.1:6820:6820"]
    assert "ports" not in services["mariadb"] and "ports" not in services["slurmdbd"]
    assert data["volumes"]["accounting"] == {}
    assert services["jail-populate"]["environment"]["SLURMFORGE_JAIL_DIGEST"] == "sha256:abc"
    assert services["login"]["ports"] == ["127.0.0.1:2222:22"]


def test_a_service_whose_bound_files_were_replaced_is_made_again(
    write_cluster, versions, tmp_path: Path
) -> None:
    """A container keeps the directory it was started with: where the reviewable directory was
    deleted and written again (a new checkout at the same path), its services' labels change,
    so Compose makes them again instead of calling them up to date."""
    cluster = _two_sets(write_cluster, versions)
    secrets, out = secret_files(tmp_path), tmp_path / "out"

    def labels() -> dict[str, str]:
        services = render.render(cluster, secrets, "sha256:0", directory=out)["services"]
        return {n: s["labels"].get(render.BOUND_LABEL, "") for n, s in services.items()}

    assert not any(labels().values())  # nothing there yet: nothing to tell apart
    services = render.render(cluster, secrets, "sha256:0")["services"]
    assert not any(render.BOUND_LABEL in s["labels"] for s in services.values())
    for volume in (v for s in services.values() for v in s["volumes"]):
        if volume.startswith("./"):
            (out / volume.split(":")[0]).mkdir(parents=True, exist_ok=True)
    for secret in secrets.values():
        secret.write_bytes(b"a key")
    first = labels()
    assert first["slurmctld"] and first["cpu-0"] and first["login"], first
    assert labels() == first  # written again in place: nothing is made again
    (out / "etc" / "slurm").rename(tmp_path / "old")
    (out / "etc" / "slurm").mkdir()
    second = labels()
    readers = {n for n, s in services.items() if any("./etc/slurm:" in v for v in s["volumes"])}
    assert {"slurmctld", "cpu-0", "big-2", "login"} <= readers
    assert {n for n in first if first[n] != second[n]} == readers
    key = secrets["munge.key"]
    key.rename(tmp_path / "old-key")
    key.write_bytes(b"a new key")
    holders = {n for n, s in services.items() if any(str(key) in v for v in s["volumes"])}
    assert holders and {n for n in first if second[n] != labels()[n]} == holders


def test_compose_cli_accepts_the_file(write_cluster, versions, tmp_path: Path) -> None:
    """Every Compose CLI this machine has (v2 from scripts/setup; v1 where the machine has
    Debian 12's) takes the file as it is written, and says nothing of it (v2 warned on every
    command while the file had a `version`)."""
    cluster = _two_sets(write_cluster, versions)
    file = tmp_path / "compose.yaml"
    file.write_text(render.dump(render.render(cluster, secret_files(tmp_path), "sha256:0"), "x"))
    clis = [["docker-compose"]] if shutil.which("docker-compose") else []
    if shutil.which("docker"):
        v2 = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        clis += [["docker", "compose"]] if v2.returncode == 0 else []
    assert clis, "no Compose CLI here: run scripts/setup"
    for cli in clis:
        proc = subprocess.run(
            [*cli, "-f", str(file), "--profile", "setup", "config", "-q"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0 and not proc.stderr.strip(), (cli, proc.stderr)


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"slurm": {"conf": {"MaxArraySize": [1000, 2000]}}}, "slurm.conf.MaxArraySize"),
        (
            {"slurm": {"cgroup_conf": {"AllowedRAMSpace": {"a": 1}}}},
            "slurm.cgroup_conf.AllowedRAMSpace",
        ),
        (
            {"nodesets": [{"name": "cpu", "definitions": ["cpu-small"], "slurm": {"Weight": [1]}}]},
            "nodesets[0].slurm.Weight",
        ),
        (
            {"partitions": [{"name": "main", "nodesets": ["cpu"], "slurm": {"PriorityTier": [1]}}]},
            "partitions[0].slurm.PriorityTier",
        ),
    ],
)
def test_a_key_path_names_only_keys_the_file_has(write_cluster, versions, changes, key) -> None:
    """Not pydantic's names of a union's branches (slurm.conf.MaxArraySize.str)."""
    path = write_cluster(shipped_with(**changes))
    with pytest.raises(ConfigError) as refused:
        loader.load(path, versions)
    assert refused.value.message.startswith(f"{path}: {key}: "), refused.value.message
