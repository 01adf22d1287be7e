"""controller.replicas: 2 — a backup slurmctld on the primary's StateSaveLocation: what the
cluster file may say, and what the Slurm config and the Compose file make of it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from slurmforge import config
from slurmforge.deploy import loader
from slurmforge.deploy.backup import archive
from slurmforge.deploy.k8s import apply, controllers, restore
from slurmforge.deploy.local import render
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.common import ROOT, dump_yaml, load_yaml
from tests.unit.helpers import assert_clean_failure, run_invoke, secret_files, shipped_with
from tests.unit.kube import rendered_kube


@pytest.fixture(scope="module")
def versions() -> config.Config:
    return load_versions(ROOT / "versions.yaml")


def _conf(cluster) -> list[str]:
    return slurmconf.render(cluster)["slurm.conf"].splitlines()


def test_one_controller_is_the_default_and_its_config_is_as_before(write_cluster, versions):
    conf = _conf(loader.load(write_cluster(shipped_with()), versions))
    assert [line for line in conf if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=slurmctld"
    ]
    assert not [line for line in conf if line.startswith(("SlurmctldTimeout", "SlurmctldPrimary"))]


def test_a_backup_is_the_second_controller_slurm_conf_names(write_cluster, versions) -> None:
    data = shipped_with(controller={"replicas": 2, "failover_after": 15})
    conf = _conf(loader.load(write_cluster(data), versions))
    hosts = [line for line in conf if line.startswith("SlurmctldHost=")]
    assert hosts == ["SlurmctldHost=slurmctld", "SlurmctldHost=slurmctld-backup"]
    assert "SlurmctldTimeout=15" in conf
    assert "SlurmctldPrimaryOnProg=/etc/slurm/primary-on" in conf


def _fake(directory: Path, name: str, body: str) -> None:
    (directory / name).write_text(f"#!/bin/bash\n{body}\n")
    (directory / name).chmod(0o755)


def _primary_on(write_cluster, versions, tmp_path: Path, sinfo: list[str], squeue: str,
                config_text: str = "") -> list[str]:  # fmt: skip
    """primary-on run with Slurm's commands answering as given (``squeue``: a shell body that
    sees its arguments), watching as long as PRIMARY_ON_WATCH says; every change it asks of
    Slurm, and each of its sleeps, in order. It returns at once (slurmctld is not kept
    waiting); its watch goes on in the background."""
    data = shipped_with(controller={"replicas": 2})
    script = slurmconf.render(loader.load(write_cluster(data), versions))["primary-on"]
    bin_, log = tmp_path / "bin", tmp_path / "calls"
    bin_.mkdir()
    # Slurm's hostlist grammar, as far as these tests write it: cpu-[1,3],cpu-5, cpu-[0-1]
    (bin_ / "hostnames.py").write_text(
        "import re, sys\n"
        "for part in re.findall(r'[^,[]+(?:\\[[^]]*\\])?', sys.argv[1]):\n"
        "    m = re.fullmatch(r'(.*)\\[(.*)\\]', part)\n"
        "    for r in m[2].split(',') if m else []:\n"
        "        a, _, b = r.partition('-')\n"
        "        print(*(m[1] + str(i) for i in range(int(a), int(b or a) + 1)), sep='\\n')\n"
        "    if not m:\n"
        "        print(part)\n"
    )
    state = tmp_path / "state"  # StateSaveLocation, where it says what it does
    state.mkdir()
    config_text += f"\\nStateSaveLocation       = {state}"
    _fake(bin_, "scontrol", f'if [[ $1 == show && $2 == config ]]; then printf "{config_text}\\n"; '
          f'elif [[ $1 == show && $2 == hostnames ]]; then python3 {bin_}/hostnames.py "$3"; '
          'elif [[ $1 == show && $2 == job ]]; then echo " Requeue=$(( $3 != 43 ))"; '
          f'else echo "scontrol $*" >> {log}; fi')  # fmt: skip
    _fake(bin_, "scancel", f'echo "scancel $*" >> {log}')
    _fake(bin_, "sinfo", "printf '%s\\n' " + " ".join(f"'{line}'" for line in sinfo))
    _fake(bin_, "squeue", squeue.replace("LOG", str(log)))
    _fake(bin_, "sleep", f'echo "sleep $*" >> {log}')
    (tmp_path / "primary-on").write_text(script)
    (tmp_path / "primary-on").chmod(0o755)
    start = time.monotonic()
    subprocess.run([tmp_path / "primary-on"], env={"PATH": f"{bin_}:/usr/bin:/bin"}, timeout=10)
    assert time.monotonic() - start < 5
    watch = slurmconf.PRIMARY_ON_WATCH // 10
    while time.monotonic() - start < 20 and (
        (log.read_text() if log.exists() else "").count("sleep") < watch
    ):
        time.sleep(0.05)
    time.sleep(0.3)  # the last look
    return log.read_text().splitlines()


@pytest.fixture
def short_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """primary-on watching 100 s, not 10 minutes: ten looks (each sleep returns at once here)."""
    monkeypatch.setattr(slurmconf, "PRIMARY_ON_WATCH", 100)


@pytest.mark.usefixtures("short_watch")
@pytest.mark.parametrize(("batch", "message", "looks"), [(10, 10, 3), (30, 60, 5), (5, 3, 2)])
def test_a_controller_taking_control_has_the_allocated_nodes_register_again(
    write_cluster, versions, tmp_path: Path, batch: int, message: int, looks: int
) -> None:
    """primary-on looks every 10 s. Once Slurm would end a batch job its node no longer has
    (BatchStartTimeout + MessageTimeout up to 10 s, then 10 s more), it has every node a job
    runs on, as this controller knows it (an idle one too), and every allocated or mixed node
    register again, and once more 30 s later; a drained or draining node stays so."""
    config_text = f"BatchStartTimeout       = {batch} sec\\nMessageTimeout          = {message} sec"
    sinfo = ["cpu-0 allocated", "cpu-0 allocated", "cpu-2 mixed", "cpu-3 draining", "cpu-5 mixed"]
    # the jobs this controller holds as running: on cpu-1 and cpu-3, and on cpu-5
    squeue = "if [[ $* == *%i* ]]; then echo '7 cpu-[1,3]'; echo '8 cpu-5'; " \
        "else echo 'cpu-[1,3]'; echo cpu-5; fi"  # fmt: skip
    calls = _primary_on(write_cluster, versions, tmp_path, sinfo, squeue, config_text)
    update = "scontrol update nodename=cpu-0,cpu-1,cpu-2,cpu-5 state=undrain"
    tick = ["sleep 10"]
    rest = slurmconf.PRIMARY_ON_WATCH // 10 - looks - 3
    assert calls == tick * looks + [update] + tick * 3 + [update] + tick * rest


@pytest.mark.usefixtures("short_watch")
def test_a_job_running_on_an_idle_node_at_two_looks_is_requeued_and_said_so(
    write_cluster, versions, tmp_path: Path
) -> None:
    """The nodes' word that a job's epilog ran, which the dead controller never took, made them
    idle under the job the new one holds as running (job_epilog_complete -> make_node_idle):
    seen so at two looks, the job is requeued (cancelled under --no-requeue), its AdminComment
    saying why, and primary-on.log in StateSaveLocation says so. A job seen so at one look
    only, or running on busy nodes, is left alone."""
    sinfo = ["cpu-0 idle", "cpu-1 idle", "cpu-2 idle", "cpu-3 allocated", "cpu-4 idle"]
    # 42 holds idle nodes, 43 (--no-requeue) an idle one and a busy one, 44 a busy one; 45 is
    # on an idle node at the first look only (it ended); a requeued job runs no more
    squeue = (
        "if [[ $* == *%i* ]]; then "
        "grep -q 'requeue 42' LOG 2> /dev/null || echo '42 cpu-[0-1]'; "
        "grep -q 'scancel 43' LOG 2> /dev/null || echo '43 cpu-2,cpu-3'; echo '44 cpu-3'; "
        "[[ -e LOG.45 ]] || { touch LOG.45; echo '45 cpu-4'; }; fi"
    )
    calls = _primary_on(write_cluster, versions, tmp_path, sinfo, squeue)
    why = "slurmforge primary-on: its nodes had ended it under the previous controller"
    changes = [c for c in calls if c != "sleep 10" and not c.endswith("state=undrain")]
    assert changes == [
        f"scontrol update jobid=42 admincomment={why}; requeued",
        "scontrol requeue 42",
        f"scontrol update jobid=43 admincomment={why}; cancelled (--no-requeue)",
        "scancel 43",
    ]
    assert calls[:3] == ["sleep 10", "sleep 10", changes[0]]  # at the second look
    said = (tmp_path / "state" / "primary-on.log").read_text()
    assert "slurmforge primary-on: job 42 runs on idle nodes: requeued" in said
    assert "slurmforge primary-on: job 43 runs on idle nodes: cancelled (--no-requeue)" in said


def test_one_controller_runs_nothing_when_it_takes_control(write_cluster, versions) -> None:
    files = slurmconf.render(loader.load(write_cluster(shipped_with()), versions))
    assert "primary-on" not in files


def test_both_controllers_share_the_state_volume_and_every_secret(
    write_cluster, versions, tmp_path: Path
) -> None:
    cluster = loader.load(write_cluster(shipped_with(controller={"replicas": 2})), versions)
    services = render.render(cluster, secret_files(tmp_path), "sha256:0")["services"]
    primary, backup = services["slurmctld"], services["slurmctld-backup"]
    # slurmctld knows which SlurmctldHost it is by its host name
    assert (primary["hostname"], backup["hostname"]) == ("slurmctld", "slurmctld-backup")
    assert backup["volumes"] == primary["volumes"]
    assert "state:/var/spool/slurmctld" in backup["volumes"]
    assert backup["image"] == primary["image"] and backup["command"] == primary["command"]
    # nothing in the file makes either again when another service is (Compose v2 would)
    assert not [name for name, s in services.items() if "depends_on" in s]


@pytest.mark.parametrize(
    ("controller", "expected"),
    [
        ({"replicas": 3}, "controller.replicas: Input should be less than or equal to 2"),
        ({"replicas": 0}, "controller.replicas: Input should be greater than or equal to 1"),
        ({"replicas": "2"}, "controller.replicas: input should be a valid integer, got str"),
        ({"failover_after": 1}, "controller.failover_after: Input should be greater than"),
        ({"failover_after": "10s"}, "controller.failover_after: input should be a valid integer"),
        ({"backups": 1}, "controller.backups"),
    ],
)
def test_bad_controller_settings_are_refused_in_one_line(
    write_cluster, controller: dict, expected: str
) -> None:
    path = write_cluster(shipped_with(controller=controller))
    proc = run_invoke("deploy", "--dry-run", "--cluster", str(path))
    assert_clean_failure(proc, f"{path}: {expected}")


def _ha_checkout(checkout, **kubernetes) -> tuple[Path, Path]:
    """The k8s unit cluster (tests/unit/kube.py) with a backup controller."""
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())
    data["controller"] = {"replicas": 2}
    data["kubernetes"].update(kubernetes)
    cluster_file.write_text(dump_yaml(data, sort_keys=False))
    return cluster_file, root


def _objects(kube) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in kube.manifests.objects.values()}


def test_k8s_two_controllers_are_one_set_of_two_on_one_shared_claim(checkout) -> None:
    cluster_file, root = _ha_checkout(checkout, state={"storage_class": "cephfs", "size": "2Gi"})
    kube = rendered_kube(cluster_file, root)
    kube.manifests.validate()  # against the API's own schemas
    objects = _objects(kube)
    ctld = objects[("StatefulSet", "slurmctld")]["spec"]
    assert ctld["replicas"] == 2 and "volumeClaimTemplates" not in ctld
    pod = ctld["template"]["spec"]
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "slurmctld-state"}} in pod[
        "volumes"
    ]
    state = objects[("PersistentVolumeClaim", "slurmctld-state")]["spec"]
    assert state["accessModes"] == ["ReadWriteMany"]
    assert (state["storageClassName"], state["resources"]["requests"]["storage"]) == (
        "cephfs",
        "2Gi",
    )
    # the two request the CPU one controller does; each keeps its limit
    (container,) = pod["containers"]
    assert container["resources"]["requests"]["cpu"] == "250m"
    assert container["resources"]["limits"]["cpu"] == "2"
    # preferred, not required: the lab's one node runs both
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["podAffinityTerm"]["labelSelector"]["matchLabels"] == (ctld["selector"]["matchLabels"])
    )
    conf = objects[("ConfigMap", "slurm-config")]["data"]["slurm.conf"].splitlines()
    assert [line for line in conf if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=slurmctld-0(slurmctld-0.slurmctld)",
        "SlurmctldHost=slurmctld-1(slurmctld-1.slurmctld)",
    ]
    assert "SlurmctldTimeout=10" in conf
    # what each runs when it takes control: in the config both mount (executable, 0755)
    assert "SlurmctldPrimaryOnProg=/etc/slurm/primary-on" in conf
    assert "primary-on" in objects[("ConfigMap", "slurm-config")]["data"]


def test_k8s_one_controller_keeps_its_claim_template_and_no_affinity(checkout) -> None:
    kube = rendered_kube(*checkout)
    ctld = _objects(kube)[("StatefulSet", "slurmctld")]["spec"]
    assert ctld["replicas"] == 1 and "affinity" not in ctld["template"]["spec"]
    (template,) = ctld["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "state"
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert not [o for o in kube.manifests.objects.values() if o["metadata"]["name"] ==
                "slurmctld-state"]  # fmt: skip


def test_k8s_scheduled_backup_and_restore_use_the_shared_state_claim(checkout) -> None:
    data = {"schedule": "15 3 * * *"}
    cluster_file, root = _ha_checkout(checkout, backup=data)
    kube = rendered_kube(cluster_file, root)
    cron = _objects(kube)[("CronJob", "backup")]
    volumes = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim"
              in v]  # fmt: skip
    assert "slurmctld-state" in claims and "state-slurmctld-0" not in claims
    job = restore.Restore(kube, root / "a.tar", archive.Manifest("c", "", "", "", {}))
    assert sorted(job.claims()) == ["jail", "slurmctld-state"]
    assert job.claims()["slurmctld-state"]["spec"]["accessModes"] == ["ReadWriteMany"]


def _kubectl(answers: dict[str, tuple[int, str, str]]):
    """kubectl's stand-in: the first key found in a call's words answers it; else exit 0."""
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        for key, (code, out, err) in answers.items():
            if key in argv:
                return subprocess.CompletedProcess(argv, code, out, err)
        return subprocess.CompletedProcess(argv, 0, json.dumps({"items": []}), "")

    return calls, run


def _class(name: str, provisioner: str, default: bool = False) -> dict:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"metadata": {"name": name, "annotations": annotations}, "provisioner": provisioner}


@pytest.mark.parametrize(
    ("state_class", "answers", "expected"),
    [
        ("gp3", {"gp3": (0, json.dumps(_class("gp3", "ebs.csi.aws.com")), "")},
         "kubernetes.state.storage_class: gp3 (ebs.csi.aws.com) makes volumes one node mounts"),
        ("nfs", {"nfs": (1, "", 'Error from server (NotFound): storageclasses "nfs" not found')},
         "kubernetes.state.storage_class: no storage class nfs on this server"),
        (None, {"storageclasses": (0, json.dumps({"items": [
            _class("efs", "efs.csi.aws.com"), _class("local", "rancher.io/local-path", True)]}),
            "")},
         "kubernetes.state.storage_class (unset: the default class, local): local "
         "(rancher.io/local-path) makes volumes one node mounts at a time"),
    ],
)  # fmt: skip
def test_k8s_a_state_class_that_cannot_be_shared_is_refused_before_anything_is_applied(
    checkout, state_class, answers, expected
) -> None:
    state = {"size": "1Gi", **({"storage_class": state_class} if state_class else {})}
    cluster_file, root = _ha_checkout(checkout, state=state)
    calls, run = _kubectl({"--raw": (0, json.dumps({"resources": []}), ""), **answers})
    kube = rendered_kube(cluster_file, root, run)
    with pytest.raises(ConfigError) as refused:
        apply.apply(kube, 300)
    assert str(refused.value).startswith(f"{cluster_file}: {expected}")
    assert "\n" not in str(refused.value)
    assert not [c for c in calls if "apply" in c or "exec" in c]


@pytest.mark.parametrize(
    "classes",
    [[], [_class("efs", "efs.csi.aws.com", default=True)]],
)
def test_k8s_a_shareable_or_unnamed_class_is_taken(checkout, classes) -> None:
    """No class named and none the default: the claim binds to a volume a site made (the lab)."""
    cluster_file, root = _ha_checkout(checkout)
    _, run = _kubectl({"storageclasses": (0, json.dumps({"items": classes}), "")})
    kube = rendered_kube(cluster_file, root, run)
    controllers.check_storage(kube.cluster, kube.k)


@pytest.mark.parametrize(("running", "wanted"), [(True, 2), (False, 1)])
def test_k8s_moving_between_one_controller_and_two_is_refused(checkout, running, wanted) -> None:
    """The state would move to another claim: the queue would start empty."""
    cluster_file, root = _ha_checkout(checkout) if wanted == 2 else checkout
    templates = {"volumeClaimTemplates": [{"metadata": {"name": "state"}}]} if running else {}
    found = {"items": [{"metadata": {"name": "slurmctld"}, "spec": templates}]}
    _, run = _kubectl({"statefulsets": (0, json.dumps(found), "")})
    kube = rendered_kube(cluster_file, root, run)
    with pytest.raises(ConfigError, match=r"controller\.replicas: namespace hpc runs") as refused:
        controllers.check_change(kube.cluster, kube.k)
    assert "invoke restore --force" in refused.value.hint


def _pod(name: str, running: bool = True, deleting: bool = False) -> dict:
    state = {"running": {}} if running else {"waiting": {"reason": "ContainerCreating"}}
    meta = {"name": name, **({"deletionTimestamp": "2026-11-26T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "status": {"containerStatuses": [{"name": "slurmctld",
                                                                "state": state}]}}  # fmt: skip


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([_pod("slurmctld-0"), _pod("slurmctld-1")], "slurmctld-0"),
        ([_pod("slurmctld-0", deleting=True), _pod("slurmctld-1")], "slurmctld-1"),
        ([_pod("slurmctld-0", running=False), _pod("slurmctld-1")], "slurmctld-1"),
        ([_pod("slurmctld-1")], "slurmctld-1"),
        ([], "slurmctld-0"),
    ],
)
def test_k8s_commands_for_the_controller_run_where_one_is_up(checkout, pods, expected) -> None:
    cluster_file, root = _ha_checkout(checkout)
    calls, run = _kubectl({"pods": (0, json.dumps({"items": pods}), "")})
    kube = rendered_kube(cluster_file, root, run)
    kube.controller_sh("squeue")
    assert calls[-1][calls[-1].index("exec") + 1] == expected
    assert kube.exec_argv("slurmctld", "sinfo")[kube.exec_argv("slurmctld", "sinfo").index(
        "-i") + 1] == expected  # fmt: skip
