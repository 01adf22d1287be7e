"""Scheduled backups (kubernetes.backup): what the k8s target renders for them, the settings it
refuses, and the backup pod's own program (snapshot.py) run here on a cluster's files laid out as
the pod mounts them: its archive is one `invoke restore` accepts, and it keeps the newest N."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from slurmforge.deploy import roles
from slurmforge.deploy.backup import archive, pod, snapshot, take
from slurmforge.deploy.spec.model import as_dict
from tests.common import load_yaml
from tests.unit.helpers import assert_clean_failure, run_invoke
from tests.unit.kube import cluster_data, pod_of, rendered_kube

SCHEDULE = {"schedule": "15 3 * * *", "keep": 3, "storage_class": "retained", "size": "50Gi"}


def _scheduled(checkout, write_cluster, **settings):
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())
    data["kubernetes"]["backup"] = settings
    return rendered_kube(write_cluster(data), root)


def test_a_schedule_renders_a_cronjob_beside_slurmctld_that_reads_and_writes_what_it_must(
    checkout,
    write_cluster,
) -> None:
    kube = _scheduled(checkout, write_cluster, **SCHEDULE)
    assert kube.manifests.validate() == ["1.29", "1.30", "1.31", "1.32"]  # strict schemas
    claim = kube.manifests.objects["pvc-backups.yaml"]["spec"]
    assert claim["accessModes"] == ["ReadWriteOnce"]
    assert claim["storageClassName"] == "retained"
    assert claim["resources"]["requests"]["storage"] == "50Gi"
    cron = kube.manifests.objects["cronjob-backup.yaml"]
    assert cron["spec"]["schedule"] == "15 3 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = pod_of(cron)
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:2] == ["slurmforge-backup", "/etc/slurmforge/backup/plan.json"]
    assert command[command.index("--keep") + 1] == "3"
    assert command[command.index("--db-host") + 1] == roles.DATABASE
    # on slurmctld's node (StateSave's claim is ReadWriteOnce), which it only reads
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    selector = pod_of(kube.manifests.objects["statefulset-slurmctld.yaml"])
    labels = kube.manifests.objects["statefulset-slurmctld.yaml"]["spec"]["selector"]["matchLabels"]
    assert selector and term["labelSelector"]["matchLabels"] == labels
    assert term["topologyKey"] == "kubernetes.io/hostname"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    state = mounts[roles.CONTROLLER_STATE.path]
    assert state["readOnly"] and volumes[state["name"]]["persistentVolumeClaim"] == {
        "claimName": "state-slurmctld-0",
        "readOnly": True,
    }
    assert mounts["/jail"]["readOnly"]
    out = command[command.index("--out") + 1]
    assert not mounts[out].get("readOnly")
    assert volumes[mounts[out]["name"]]["persistentVolumeClaim"]["claimName"] == "backups"
    # it reads every file as root, and may do nothing else
    assert container["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["DAC_READ_SEARCH"],
    }
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # the plan it follows is the one `invoke backup` follows, and each secret it names is where
    # the pod mounts it
    plan = json.loads(kube.manifests.objects["configmap-backup-config.yaml"]["data"]["plan.json"])
    want = take.plan(kube.cluster, kube.cluster.cell.slurm)
    assert plan == json.loads(want.dump())
    assert set(plan["secrets"]) == {"munge.key", "jwt_hs256.key", "db-password", "metrics-token"}
    for file, at in plan["secrets"].items():
        assert os.path.dirname(at) in mounts, file
    assert plan["files"]["model.json"] == json.dumps(as_dict(kube.cluster), indent=2) + "\n"


def test_no_schedule_renders_nothing_of_it(checkout) -> None:
    cluster_file, root = checkout
    objects = rendered_kube(cluster_file, root).manifests.objects
    assert not [n for n in objects if "backup" in n]


@pytest.mark.parametrize(
    ("settings", "key", "expected"),
    [
        ({"schedule": "0 3 * * 7"}, "kubernetes.backup.schedule", "its day of week '7'"),
        ({"schedule": "@daily", "keep": 0}, "kubernetes.backup.keep", "greater than or equal"),
        ({"schedule": "@daily", "size": "lots"}, "kubernetes.backup.size", "quantity"),
        ({"every": "day"}, "kubernetes.backup.every", "unknown key"),
    ],
)
def test_bad_backup_settings_are_refused_in_one_line(write_cluster, settings, key, expected):
    path = write_cluster(cluster_data(backup=settings))
    proc = run_invoke("deploy", "--target", "k8s", "--dry-run", "--cluster", str(path))
    assert_clean_failure(proc, f"{path}: {key}: ")
    assert expected in proc.stderr


def test_the_pod_program_writes_an_archive_restore_accepts_and_keeps_the_newest(
    tmp_path: Path,
) -> None:
    state, jail, out = tmp_path / "state", tmp_path / "jail", tmp_path / "out"
    (jail / "home" / "ada").mkdir(parents=True)
    (jail / "home" / "ada" / "data.txt").write_text("kept\n")
    (jail / "etc").mkdir()
    (jail / "etc" / "passwd").write_text("ada:x:2000:2000::/home/ada:/bin/bash\n")
    state.mkdir()
    (state / "job_state").write_bytes(b"jobs")
    (state / "job_state.new").write_bytes(b"half")  # being written: not copied
    # saved "after" the (absent) dump: no wait for slurmctld's next save
    later = time.time() + 60
    os.utime(state / "job_state", (later, later))
    (tmp_path / "munge.key").write_bytes(b"k" * 1024)
    plan = snapshot.Plan(
        cluster="train", slurm="25.11.7", slurmforge="0", images={"slurmctld": "x:1"},
        files={"cluster.yaml": "name: train\n"}, secrets={"munge.key": str(tmp_path / "munge.key")},
        state_dir=str(state), jail_root=str(jail), jail=["home", "etc/passwd", "opt/user"],
        database=None, notes=["the accounting database is the site's"],
    )  # fmt: skip
    (tmp_path / "plan.json").write_text(plan.dump())
    # archives of earlier runs, of another cluster, and a file that only looks like one
    out.mkdir()
    older = [archive.archive_name("train", f"2026010{d}T030000Z") for d in (1, 2, 3)]
    for name in [*older, archive.archive_name("other", "20260101T030000Z"), "slurmforge-x.tar"]:
        (out / name).write_bytes(b"")
    assert pod.main([str(tmp_path / "plan.json"), "--out", str(out), "--keep", "2"]) == 0
    kept = sorted(p.name for p in out.iterdir())
    (new,) = [n for n in kept if n.startswith("slurmforge-train-") and n not in older]
    assert kept == sorted([older[2], new, "slurmforge-other-20260101T030000Z.tar",
                           "slurmforge-x.tar"])  # fmt: skip
    manifest = archive.verify(out / new)
    assert manifest.cluster == "train" and manifest.slurm == "25.11.7"
    assert manifest.notes == ["the accounting database is the site's"]
    assert "database.sql" not in manifest.members
    with archive.member(out / new, "state.tar") as source:
        listing = subprocess.run(["tar", "-t"], input=source.read(), capture_output=True).stdout
    assert listing.decode().split() == ["./", "./job_state"]
    with archive.member(out / new, "jail.tar") as source:
        listing = subprocess.run(["tar", "-t"], input=source.read(), capture_output=True).stdout
    assert sorted(listing.decode().split()) == [
        "etc/passwd", "home/", "home/ada/", "home/ada/data.txt"
    ]  # fmt: skip
    with archive.member(out / new, "secrets/munge.key") as source:
        assert source.read() == b"k" * 1024


@pytest.mark.parametrize("changing", [1, snapshot.STATE_TRIES])
def test_statesave_changed_under_its_copy_is_copied_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changing: int
) -> None:
    """tar exits 1 when a file changed as it read it (slurmctld renamed a save into place; CI
    saw it on the k8s lab): the copy is made again, and kept with a note only when every copy
    met a save."""
    state, out = tmp_path / "state", tmp_path / "out"
    state.mkdir()
    (state / "job_state").write_bytes(b"jobs")
    later = time.time() + 60
    os.utime(state / "job_state", (later, later))
    # the machine's tar, which says the first `changing` times it copies StateSave that the
    # directory changed
    shim, count = tmp_path / "bin", tmp_path / "state-copies"
    shim.mkdir()
    real = subprocess.run(["bash", "-c", "command -v tar"], capture_output=True, text=True)
    (shim / "tar").write_text(
        f'#!/bin/bash\n{real.stdout.strip()} "$@" || exit\n[[ $* == *" -C {state} "* ]] || exit 0\n'
        f"echo copy >> {count}\n"
        f"if (( $(wc -l < {count}) <= {changing} )); then\n"
        "  echo 'tar: .: file changed as we read it' >&2; exit 1\nfi\n"
    )
    (shim / "tar").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    monkeypatch.setattr(time, "sleep", lambda s: None)
    plan = snapshot.Plan(
        cluster="train", slurm="25.11.7", slurmforge="0", images={}, files={}, secrets={},
        state_dir=str(state), jail_root=str(tmp_path), jail=["home"], database=None,
    )  # fmt: skip
    (tmp_path / "home").mkdir()
    (tmp_path / "plan.json").write_text(plan.dump())
    assert pod.main([str(tmp_path / "plan.json"), "--out", str(out), "--keep", "2"]) == 0
    assert len(count.read_text().splitlines()) == min(changing + 1, snapshot.STATE_TRIES)
    (made,) = out.iterdir()
    manifest = archive.verify(made)
    with archive.member(made, "state.tar") as source:
        listing = subprocess.run(["tar", "-t"], input=source.read(), capture_output=True).stdout
    assert listing.decode().split() == ["./", "./job_state"]  # one copy, whole
    noted = [n for n in manifest.notes if "StateSave changed" in n]
    assert len(noted) == (changing == snapshot.STATE_TRIES)


def test_a_pod_without_a_secret_fails_and_leaves_no_archive(tmp_path: Path, capsys) -> None:
    plan = snapshot.Plan(
        cluster="train", slurm="25.11.7", slurmforge="0", images={}, files={},
        secrets={"munge.key": str(tmp_path / "absent")}, state_dir=str(tmp_path),
        jail_root=str(tmp_path), jail=[], database=None,
    )  # fmt: skip
    (tmp_path / "plan.json").write_text(plan.dump())
    out = tmp_path / "out"
    assert pod.main([str(tmp_path / "plan.json"), "--out", str(out), "--keep", "2"]) == 1
    assert "has no munge.key to back up" in capsys.readouterr().err
    assert list(out.iterdir()) == []
    # no password file where the schedule's pod expects its Secret: one line, no archive
    argv = [str(tmp_path / "plan.json"), "--out", str(out), "--keep", "2",
            "--db-host", "mariadb", "--db-password-file", str(tmp_path / "absent")]  # fmt: skip
    assert pod.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "absent" in err and len(err.splitlines()) == 1
    assert list(out.iterdir()) == []
