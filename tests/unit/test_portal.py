"""The web portal's part of a cluster file: what is refused before anything runs, and what the
hub and its service are given (its settings, its secrets as files, its published port)."""

from __future__ import annotations

import datetime
import json
import os
import re
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509

from slurmforge import config
from slurmforge.deploy import loader, monitoring, portal, portal_tls, roles
from slurmforge.deploy.backup import archive, pod, restoring, snapshot, take
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.k8s import restore
from slurmforge.deploy.local import render
from slurmforge.errors import ConfigError
from slurmforge.versions import load as load_versions
from tests.common import ROOT, load_yaml
from tests.unit.helpers import secret_files, shipped_with
from tests.unit.kube import cluster_data, pod_of, rendered_kube, with_images_lock


@pytest.fixture
def versions() -> config.Config:
    return load_versions(ROOT / "versions.yaml")


def _two_partitions(**portal_keys) -> dict:
    return shipped_with(
        nodesets=[
            {"name": "cpu", "definitions": ["cpu-small"], "replicas": 2},
            {"name": "big", "definitions": ["base"], "replicas": 1, "cpus": 8, "memory_mb": 16384},
        ],
        partitions=[
            {"name": "main", "nodesets": ["cpu"], "default": True},
            {"name": "large", "nodesets": ["big"]},
        ],
        portal={"enabled": True, **portal_keys},
    )


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"port": 0}, "portal.port: Input should be greater than or equal to 1"),
        ({"port": 70000}, "portal.port: Input should be less than or equal to 65535"),
        ({"port": 2222}, "portal.port: 2222 is login.port already"),
        ({"form": {"partition": "gpu"}}, "portal.form.partition: no partition 'gpu'"),
        (
            {"form": {"cpus": 4}},
            "portal.form.cpus: 4 is more than the node sets of partition 'main' have (at most 1)",
        ),
        ({"form": {"partition": "large", "memory_mb": 32768}}, "portal.form.memory_mb: 32768"),
        (
            {"form": {"gpus": 1}},
            "portal.form.gpus: 1 is more than the node sets of partition 'main' have",
        ),
        ({"idle": 60}, "portal.idle: unknown key"),
        ({"idle_timeout": "soon"}, "portal.idle_timeout: expected a duration"),
        ({"start_timeout": 5}, "portal.start_timeout: Input should be greater than or equal"),
    ],
)
def test_bad_portal_settings_are_refused(write_cluster, versions, keys, message) -> None:
    path = write_cluster(_two_partitions(**keys))
    with pytest.raises(ConfigError) as exc:
        loader.load(path, versions)
    assert exc.value.message.startswith(f"{path}: ")
    assert message in exc.value.message, exc.value.message


def _pem(tmp_path: Path, name: str, data: bytes, mode: int = 0o600) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def test_a_sites_certificate_must_be_whole_its_own_and_valid_now(
    write_cluster, versions, tmp_path: Path
) -> None:
    good = portal_tls.make()
    other = portal_tls.make()
    cert_of = good[: good.index(b"-----BEGIN PRIVATE KEY")]
    key_of_other = other[other.index(b"-----BEGIN PRIVATE KEY") :]
    long_ago = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    cases = {
        "expired.pem": (portal_tls.make(now=long_ago), 0o600, "the certificate expired on 2022-"),
        "mixed.pem": (cert_of + key_of_other, 0o600, "the private key is not the first cert"),
        "nokey.pem": (cert_of, 0o600, "no PEM private key in it"),
        "nocert.pem": (key_of_other, 0o600, "no PEM certificate in it"),
        "open.pem": (good, 0o644, "is open to others (mode 0644)"),
    }
    for name, (data, mode, message) in cases.items():
        path = write_cluster(_two_partitions(tls_pem=_pem(tmp_path, name, data, mode)))
        with pytest.raises(ConfigError) as exc:
            loader.load(path, versions)
        assert exc.value.message.startswith(f"{path}: portal.tls_pem: "), exc.value.message
        assert message in exc.value.message, (name, exc.value.message)
    path = write_cluster(_two_partitions(tls_pem=str(tmp_path / "missing.pem")))
    with pytest.raises(ConfigError, match=r"portal\.tls_pem: no file "):
        loader.load(path, versions)
    # a whole one is taken, and is the file the hub is given
    fine = _pem(tmp_path, "fine.pem", good)
    cluster = loader.load(write_cluster(_two_partitions(tls_pem=fine)), versions)
    assert roles.cluster_secrets(cluster.spec)[roles.PORTAL_TLS] == Path(fine)


def test_a_made_certificate_serves_the_hubs_names_for_years() -> None:
    data = portal_tls.make()
    cert = portal_tls.check("made", data)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "portal"} <= set(names.get_values_for_type(x509.DNSName))
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime > datetime.timedelta(days=800)
    assert re.fullmatch(r"([0-9A-F]{2}:){31}[0-9A-F]{2}", portal_tls.fingerprint(cert))


def test_the_form_offers_each_partition_up_to_its_largest_node(write_cluster, versions) -> None:
    cluster = loader.load(
        write_cluster(
            _two_partitions(
                idle_timeout="10m", form={"partition": "large", "cpus": 2, "time": "2h"}
            )
        ),
        versions,
    )
    settings = portal.settings(cluster)
    small = cluster.nodeset("cpu")
    assert settings["partitions"] == {
        "main": {"cpus": small.cpus, "memory_mb": small.memory_mb, "gpus": 0},
        "large": {"cpus": 8, "memory_mb": 16384, "gpus": 0},
    }
    assert settings["form"] == {
        "partition": "large", "cpus": 2, "memory_mb": 1024, "time": 7200, "gpus": 0
    }  # fmt: skip
    assert (settings["idle_timeout"], settings["start_timeout"]) == (600, 300)
    text = portal.files(cluster)[portal.SETTINGS_FILE]
    assert text.startswith("# Generated by slurmforge from ")
    assert load_yaml(text) == settings


def test_the_hub_gets_its_secrets_as_files_and_its_port_on_the_login_address(
    write_cluster, versions, tmp_path: Path
) -> None:
    cluster = loader.load(write_cluster(_two_partitions(port=18000)), versions)
    services = render.render(cluster, secret_files(tmp_path), "sha256:abc")["services"]
    hub = services["portal"]
    assert hub["ports"] == ["127.0.0.1:18000:8000"]
    for secret in ("portal-cookie-secret", "portal-proxy-token", "portal-tls.pem", "munge.key"):
        assert f"{tmp_path / secret}:/run/secrets/{secret}:ro" in hub["volumes"]
    # the hub's secrets reach the hub alone, and never through the environment
    others = [v for name, s in services.items() if name != "portal" for v in s["volumes"]]
    assert not any("portal-" in v for v in others)
    assert not any(str(tmp_path) in str(v) for v in hub.get("environment", {}).values())
    assert "./etc/portal:/etc/slurmforge/portal:ro" in hub["volumes"]
    assert "portal:/var/lib/jupyterhub" in hub["volumes"]  # its database outlives the container
    assert hub["labels"][render.PORTAL_LABEL]  # a settings change recreates it
    # the cluster's Prometheus scrapes the hub
    jobs = monitoring.prometheus_config(cluster, [])["scrape_configs"]
    token = {"type": "Bearer", "credentials_file": "/run/secrets/metrics-token"}
    assert {"job_name": "portal", "metrics_path": "/hub/metrics", "authorization": token,
            "static_configs": [{"targets": ["portal:8081"]}]} in jobs  # fmt: skip
    # on the management network with Prometheus, and its users' network
    assert hub["networks"] == ["default", "management"]
    assert "/run/secrets/metrics-token:ro" in " ".join(hub["volumes"])


def test_without_the_portal_nothing_of_it_is_rendered(write_cluster, versions, tmp_path) -> None:
    cluster = loader.load(write_cluster(shipped_with()), versions)
    services = render.render(cluster, secret_files(tmp_path), "sha256:abc")["services"]
    assert "portal" not in services
    assert portal.files(cluster) == {}
    assert roles.PORTAL_COOKIE not in roles.cluster_secrets(cluster.spec)


def test_directory_passwords_are_checked_only_where_the_portal_needs_them(
    write_cluster, versions, tmp_path: Path
) -> None:
    (tmp_path / "directory.ldif").write_text("")
    ldap = {"source": "ldap", "ldap": {"embedded": True, "base_dn": "dc=x,dc=example"}}
    keys_only = loader.load(write_cluster(shipped_with(identity=ldap)), versions)
    conf = sssd.files(keys_only.spec, keys_only.path)["sssd.conf"]
    assert "auth_provider = none" in conf and "pam" not in conf
    with_portal = loader.load(
        write_cluster(shipped_with(identity=ldap, portal={"enabled": True})), versions
    )
    conf = sssd.files(with_portal.spec, with_portal.path)["sssd.conf"]
    assert "services = nss, ssh, pam" in conf and "auth_provider = ldap" in conf


def test_on_kubernetes_users_reach_the_proxy_and_nodes_the_hub_by_name(
    write_cluster, tmp_path: Path
) -> None:
    data = cluster_data()
    data["portal"] = {"enabled": True, "port": 18000}
    cluster_file = write_cluster(data)
    kube = rendered_kube(cluster_file, with_images_lock(cluster_file, tmp_path))
    objects = kube.manifests.objects
    # notebook servers reach the hub's API by the Service's name, and its metrics are scraped
    inside = objects["service-portal.yaml"]
    assert inside["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in inside["spec"]["ports"]] == [8081]
    assert inside["metadata"]["annotations"]["prometheus.io/path"] == "/hub/metrics"
    token = {"name": "metrics-token", "key": "metrics-token"}
    assert objects["servicemonitor-portal.yaml"]["spec"]["endpoints"] == [
        {"port": "hub-api", "path": "/hub/metrics", "bearerTokenSecret": token}
    ]
    # users reach the proxy through a Service of the login Service's type, beside it
    public = objects["service-portal-public.yaml"]
    assert public["spec"]["type"] == "NodePort"
    assert public["spec"]["ports"] == [
        {"name": "https", "port": 18000, "targetPort": 8000, "protocol": "TCP"}
    ]
    assert public["spec"]["selector"] == inside["spec"]["selector"]
    # the hub reaches a node's server at the node's name in the nodes' Service
    config = objects[f"configmap-{roles.PORTAL_CONF.name}.yaml"]["data"][portal.SETTINGS_FILE]
    assert load_yaml(config)["node_domain"] == "slurm-nodes"
    # its database on a claim of its own, its secrets from Secrets mounted into it alone
    hub = objects["statefulset-portal.yaml"]["spec"]
    assert [c["metadata"]["name"] for c in hub["volumeClaimTemplates"]] == ["portal"]
    secrets = {
        v["secret"]["secretName"] for v in hub["template"]["spec"]["volumes"] if "secret" in v
    }
    assert {"portal-cookie-secret", "portal-proxy-token", "munge-key"} <= secrets
    for name, obj in objects.items():
        pod = pod_of(obj)
        if pod is None or name == "statefulset-portal.yaml":
            continue
        mounted = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        assert not mounted & {"portal-cookie-secret", "portal-proxy-token"}, name


def test_a_backup_copies_the_hubs_database_whole_while_the_hub_writes_it(tmp_path: Path) -> None:
    """The copy is SQLite's online backup where the hub runs (here: this machine's python3, as
    the scheduled pod's source runs commands): a database another connection writes to all the
    while comes out whole, holding every row committed before the copy began."""
    db = tmp_path / "jupyterhub.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("create table users (name text, blob text)")
        con.executemany("insert into users values (?, ?)", [(f"u{i}", "x" * 2000) for i in
                                                            range(2000)])  # fmt: skip
    stop = threading.Event()

    def write() -> None:  # the hub, logging users in meanwhile
        con = sqlite3.connect(db, timeout=30)
        while not stop.is_set():
            with con:
                con.execute("insert into users values ('late', ?)", ("y" * 2000,))
            time.sleep(0.001)
        con.close()

    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "job_state").write_bytes(b"jobs")
    later = time.time() + 60
    os.utime(tmp_path / "state" / "job_state", (later, later))
    (tmp_path / "home").mkdir()
    plan = snapshot.Plan(
        cluster="train", slurm="25.11.7", slurmforge="0", images={}, files={}, secrets={},
        state_dir=str(tmp_path / "state"), jail_root=str(tmp_path), jail=["home"], database=None,
        portal_db=str(db),
    )  # fmt: skip
    source = pod.PodSource(None, "", None)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        made, _ = snapshot.Snapshot(plan, source, tmp_path / "out").run()
    finally:
        stop.set()
        writer.join()
    manifest = archive.verify(made)
    copy = tmp_path / "copy.sqlite"
    with archive.member(made, restoring.PORTAL_MEMBER) as source:
        copy.write_bytes(source.read())
    with sqlite3.connect(copy) as con:
        assert con.execute("pragma integrity_check").fetchone() == ("ok",)
        assert con.execute("select count(*) from users where name != 'late'").fetchone() == (2000,)
    assert manifest.members[restoring.PORTAL_MEMBER]["size"] == copy.stat().st_size


def test_the_hubs_database_is_backed_up_and_restored_where_the_hub_keeps_it(
    write_cluster, tmp_path: Path
) -> None:
    data = cluster_data()
    data["portal"] = {"enabled": True, "port": 18000}
    data["kubernetes"]["backup"] = {"schedule": "15 3 * * *"}
    cluster_file = write_cluster(data)
    kube = rendered_kube(cluster_file, with_images_lock(cluster_file, tmp_path))
    # `invoke backup` copies it in the hub's container, from its data volume or claim
    plan = take.plan(kube.cluster)
    assert plan.portal_db == f"{roles.PORTAL_DATA.path}/{roles.PORTAL_DB}"
    assert take.ContainerSource.ROLES[snapshot.PORTAL] == roles.PORTAL
    # the scheduled pod mounts no claim of the hub's: it says so in every archive it makes
    config = kube.manifests.objects[f"configmap-{roles.BACKUP_CONF.name}.yaml"]["data"]
    scheduled = snapshot.Plan(**json.loads(config["plan.json"]))
    assert scheduled.portal_db is None
    assert any("portal's database is not in scheduled backups" in n for n in scheduled.notes)
    # a k8s restore fills portal-0's claim, as its StatefulSet would make it, before it starts
    manifest = archive.Manifest("c", "", "", "", {}, members={restoring.PORTAL_MEMBER: {}})
    claims = restore.Restore(kube, tmp_path / "a.tar", manifest).claims()
    hub = kube.manifests.objects["statefulset-portal.yaml"]["spec"]["volumeClaimTemplates"][0]
    assert claims["portal-portal-0"]["spec"] == hub["spec"]
    # an archive without it (a cluster that had no portal) fills none
    old = archive.Manifest("c", "", "", "", {})
    assert "portal-portal-0" not in restore.Restore(kube, tmp_path / "a.tar", old).claims()


def test_an_archive_with_a_portal_restored_where_there_is_none_says_so(
    write_cluster, versions
) -> None:
    cluster = loader.load(write_cluster(shipped_with()), versions)
    manifest = archive.Manifest("c", "", "", "", {}, members={restoring.PORTAL_MEMBER: {}})
    assert not restoring.restores_portal(cluster, manifest)
    assert manifest.notes == [
        f"the archive's portal database is not restored: {cluster.path} has no portal"
    ]
