"""The k8s target's secrets and accounting database: no secret rendered, each mounted only where
used, slurmdbd and an external database, accounting off."""

from __future__ import annotations

import base64
import json
import re
import stat
import subprocess
from pathlib import Path

import pytest

from slurmforge.deploy import roles
from slurmforge.deploy.k8s import secrets
from slurmforge.errors import ConfigError
from tests.common import load_yaml
from tests.unit.kube import containers_of, pod_of, rendered_kube


def _secret_store(existing: dict[str, bytes] | None = None, claim: bool = False):
    """A recording stand-in for kubectl's Secrets: ``existing`` (name → content), a database
    claim when ``claim``, no pods; what each `create secret` read from its file."""
    calls: list[list[str]] = []
    created: dict[str, bytes] = {}
    store = dict(existing or {})

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "secret" in argv and "get" in argv:
            name = argv[argv.index("secret") + 1]
            if name not in store:
                return subprocess.CompletedProcess(argv, 1, "", f'(NotFound): "{name}" not found')
            return subprocess.CompletedProcess(argv, 0, base64.b64encode(store[name]).decode(), "")
        if "pvc" in argv:
            return subprocess.CompletedProcess(argv, 0 if claim else 1, "", "(NotFound)")
        if "create" in argv:
            path = Path(argv[-1].split("=", 2)[2])  # --from-file=KEY=PATH
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            name = argv[argv.index("generic") + 1]
            created[name] = store[name] = path.read_bytes()
        if "delete" in argv:
            del store[argv[-1]]
        out = json.dumps({"items": []}) if argv[-1] == "json" else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    return calls, run, created


def test_no_secret_in_the_rendered_directory(checkout) -> None:
    """The Secrets are created by deploy, each from a private file removed right after; the
    directory only refers to them by name."""
    cluster_file, root = checkout
    calls, run, created = _secret_store()
    kube = rendered_kube(cluster_file, root, run)
    assert kube.secrets.ensure() is False
    assert sorted(created) == ["db-password", "jwt-key", "metrics-token", "munge-key"]
    assert [len(created[n]) for n in ("munge-key", "jwt-key")] == [1024, 64]
    assert re.fullmatch(rb"[A-Za-z0-9_-]{43}", created["db-password"])  # as mariadb-init wants
    files = [Path(c[-1].split("=", 2)[2]) for c in calls if "create" in c]
    assert not [f for f in files if f.exists() or f.parent.exists()]  # the temporary files
    assert not [o for o in kube.manifests.objects.values() if o["kind"] == "Secret"]
    for path in kube.dir.iterdir():
        data = path.read_bytes()
        for secret in created.values():
            assert secret[:24] not in data, path
    # a redeploy makes none again
    calls.clear()
    assert kube.secrets.ensure() is False
    assert not [c for c in calls if "create" in c or "delete" in c]


def test_each_secret_is_mounted_only_where_it_is_used(checkout) -> None:
    cluster_file, root = checkout
    kube = rendered_kube(cluster_file, root)
    users: dict[str, set[str]] = {}
    by_name = {s.secret: s for s in roles.SECRETS.values()}
    for obj in kube.manifests.objects.values():
        for c in containers_of(obj):
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            for m in c.get("volumeMounts", []):
                secret = by_name.get(m["name"])
                if secret is None:
                    continue
                users.setdefault(secret.secret, set()).add(c["name"])
                assert m["readOnly"] and m["mountPath"] == secret.dir
                assert env[secret.env] == f"{secret.dir}/{secret.file}"  # where the image reads it
    assert users == {
        "munge-key": {
            *("slurmctld", "slurmd", "login", "slurmdbd", "slurmrestd", "gpu-health-check"),
            "exporter",
        },
        "jwt-key": {"slurmctld", "slurmdbd"},  # slurmrestd passes each request's token on
        "db-password": {"mariadb", "slurmdbd"},
        # the exporter checks each scrape's token (the site's Prometheus presents it)
        "metrics-token": {"exporter"},
    }


def test_slurmdbd_runs_under_its_dbd_host_and_slurmctld_reaches_it(checkout) -> None:
    cluster_file, root = checkout
    objects = rendered_kube(cluster_file, root).manifests.objects
    dbd_conf = objects["configmap-slurmdbd-config.yaml"]["data"]["slurmdbd.conf"]
    slurm_conf = objects["configmap-slurm-config.yaml"]["data"]["slurm.conf"]
    pod = pod_of(objects["deployment-slurmdbd.yaml"])
    assert f"DbdHost={pod['hostname']}\n" in dbd_conf
    assert "\nStoragePass" not in dbd_conf and "StorageHost=mariadb\n" in dbd_conf
    service = objects["service-slurmdbd.yaml"]
    assert f"AccountingStorageHost={service['metadata']['name']}\n" in slurm_conf
    assert service["spec"]["ports"][0]["port"] == 6819
    # one slurmdbd at a time, after the database answers
    assert objects["deployment-slurmdbd.yaml"]["spec"]["strategy"] == {"type": "Recreate"}
    assert "/dev/tcp/mariadb/3306" in pod["initContainers"][-1]["command"][-1]
    database = objects["statefulset-mariadb.yaml"]["spec"]
    assert database["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert secrets.DATABASE_CLAIM == "data-mariadb-0"  # what check_database looks for
    rest = objects["service-slurmrestd.yaml"]["spec"]
    assert rest["type"] == "NodePort" and rest["ports"][0]["port"] == 6820


def test_an_external_database_replaces_mariadb_and_its_password_follows_the_file(
    checkout, write_cluster, tmp_path
) -> None:
    cluster_file, root = checkout
    password = tmp_path / "db-password"
    password.write_text("site-password-0123456789")
    password.chmod(0o600)
    data = load_yaml(cluster_file.read_text())
    database = {"host": "db.example.org", "port": 3307, "password_secret": str(password)}
    data["accounting"] = {"database": database}
    external = write_cluster(data)
    calls, run, created = _secret_store({"db-password": b"the-old-password-000000"})
    kube = rendered_kube(external, root, run)
    assert not [n for n in kube.manifests.objects if "mariadb" in n]
    wait = pod_of(kube.manifests.objects["deployment-slurmdbd.yaml"])["initContainers"][-1]
    assert "/dev/tcp/db.example.org/3307" in wait["command"][-1]
    conf = kube.manifests.objects["configmap-slurmdbd-config.yaml"]["data"]["slurmdbd.conf"]
    assert "StorageHost=db.example.org\nStoragePort=3307\n" in conf
    assert kube.secrets.ensure() is True  # the file changed: the Secret is replaced
    assert created["db-password"] == b"site-password-0123456789"
    assert ["delete", "secret", "db-password"] in [c[-3:] for c in calls]
    assert kube.secrets.ensure() is False  # and then left alone


def test_a_database_claim_without_its_password_secret_is_refused(checkout) -> None:
    cluster_file, root = checkout
    calls, run, _ = _secret_store({"munge-key": b"k"}, claim=True)
    kube = rendered_kube(cluster_file, root, run)
    with pytest.raises(ConfigError) as exc:
        kube.secrets.check_database()  # apply's first step (test_apply_runs_exactly_...)
    assert exc.value.message == (
        f"{cluster_file}: accounting: the database of cluster train exists but its password "
        "Secret is gone"
    )
    assert "data-mariadb-0" in (exc.value.hint or "")
    assert not [c for c in calls if "apply" in c or "create" in c]  # nothing applied or made


def test_accounting_off_renders_no_accounting_object(checkout, write_cluster) -> None:
    cluster_file, root = checkout
    data = load_yaml(cluster_file.read_text())
    data.update(accounting={"enabled": False}, rest={"enabled": False})
    kube = rendered_kube(write_cluster(data), root)
    names = " ".join(kube.manifests.objects)
    assert not [w for w in ("mariadb", "slurmdbd", "slurmrestd") if w in names]
    assert "jwt" not in json.dumps(kube.manifests.objects)
    assert list(kube.secrets.files()) == [roles.MUNGE, roles.METRICS_TOKEN]
