"""A cluster file's identity section: what is refused (one line naming the key, exit 2, nothing
written), what SSSD is given, and which containers get the directory's settings and secret."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from slurmforge import config
from slurmforge.deploy import loader, roles
from slurmforge.deploy.identity import probe, sssd
from slurmforge.deploy.local import render
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.versions import load as load_versions
from tests.common import ROOT
from tests.unit.helpers import assert_clean_failure, run_invoke, secret_files, shipped_with


@pytest.fixture
def versions() -> config.Config:
    return load_versions(ROOT / "versions.yaml")


CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _site(tmp_path: Path, **ldap) -> dict:
    """A site's directory, its password and CA files written under ``tmp_path``."""
    (tmp_path / "bind").write_text("s3cret\n")
    (tmp_path / "bind").chmod(0o600)
    (tmp_path / "ca.pem").write_text(CA)
    base = {
        "uri": ["ldaps://ldap.example.org", "ldap://ldap2.example.org:3389"],
        "base_dn": "dc=example,dc=org",
        "bind_dn": "cn=reader,dc=example,dc=org",
        "bind_password_file": str(tmp_path / "bind"),
        "ca_file": str(tmp_path / "ca.pem"),
    }
    return {"source": "ldap", "ldap": {**base, **ldap}}


@pytest.mark.parametrize(
    ("change", "key", "expected"),
    [
        ({"uri": ["ldap//x"]}, "identity.ldap.uri[0]", "expected ldap://HOST[:PORT]"),
        ({"uri": ["http://ldap.example.org"]}, "identity.ldap.uri[0]", "ldaps://HOST"),
        ({"uri": ["ldaps://x:port"]}, "identity.ldap.uri[0]", "expected ldap://HOST"),
        # the host, by RFC 3986: a DNS name of RFC 1123 labels, or an IP literal
        ({"uri": ["ldap://bad host:389"]}, "identity.ldap.uri[0]", "got 'bad host'"),
        ({"uri": ["ldap://a..example.org"]}, "identity.ldap.uri[0]", "host name or IP"),
        ({"uri": ["ldap://-a.example.org"]}, "identity.ldap.uri[0]", "host name or IP"),
        ({"uri": ["ldap://a_b.example.org"]}, "identity.ldap.uri[0]", "host name or IP"),
        ({"uri": [f"ldap://{'a' * 64}.org"]}, "identity.ldap.uri[0]", "host name or IP"),
        ({"uri": ["ldaps://[::g]"]}, "identity.ldap.uri[0]", "expected ldap://HOST"),
        ({"uri": ["ldaps://ok.example.org", "ldap://x y"]}, "identity.ldap.uri[1]", "'x y'"),
        ({"uri": []}, "identity.ldap.uri", "one or more ldap://"),
        ({"base_dn": "dc=example,,dc=org"}, "identity.ldap.base_dn", "expected an LDAP DN"),
        ({"user_filter": "(uid=*"}, "identity.ldap.user_filter", "expected an LDAP search"),
        ({"ca_file": "/nonexistent/ca.pem"}, "identity.ldap.ca_file", "cannot read"),
        ({"bind_password_file": "/no/pw"}, "identity.ldap.bind_password_file", "cannot read"),
        ({"bind_password_file": None}, "identity.ldap.bind_password_file", "needs the file"),
        ({"seed": "x.ldif"}, None, None),  # a site's directory has no seed: accepted, unused
    ],
)
def test_bad_directory_settings_are_refused(
    write_cluster, versions, tmp_path: Path, change: dict, key: str | None, expected: str | None
) -> None:
    path = write_cluster(shipped_with(identity=_site(tmp_path, **change)))
    if key is None:
        loader.load(path, versions)
        return
    proc = run_invoke("deploy", "--cluster", str(path), "--out", str(tmp_path / "out"))
    assert_clean_failure(proc, f"{path}: {key}")
    assert expected in proc.stderr
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "state").exists()


def test_an_unreadable_password_file_is_refused(write_cluster, tmp_path: Path) -> None:
    path = write_cluster(shipped_with(identity=_site(tmp_path)))
    (tmp_path / "bind").unlink()
    (tmp_path / "bind").mkdir()  # unreadable as a file, even to root
    proc = run_invoke("deploy", "--cluster", str(path), "--out", str(tmp_path / "out"))
    assert_clean_failure(proc, f"{path}: identity.ldap.bind_password_file: cannot read")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"source": "ldap"}, "identity.ldap: identity.source is ldap but no directory"),
        (
            {"ldap": {"base_dn": "dc=a", "embedded": True}},
            "identity.ldap: the cluster's users are local",
        ),
        (
            {"source": "ldap", "ldap": {"base_dn": "dc=a", "embedded": True, "seed": "no.ldif"}},
            "identity.ldap.seed: expected an LDIF file",
        ),
        (
            {"source": "ldap", "ldap": {"base_dn": "dc=a", "embedded": True, "uri": ["ldap://x"]}},
            "identity.ldap.uri: the embedded directory's is made by deploy",
        ),
        ({"source": "nis"}, "identity.source"),
    ],
)
def test_identity_combinations_are_refused(
    write_cluster, tmp_path: Path, data: dict, expected: str
) -> None:
    path = write_cluster(shipped_with(identity=data))
    proc = run_invoke("deploy", "--cluster", str(path), "--out", str(tmp_path / "out"))
    assert_clean_failure(proc, f"{path}: {expected}")
    assert not (tmp_path / "out").exists()


def test_createuser_only_settings_are_refused_with_a_directory(
    write_cluster, tmp_path: Path
) -> None:
    path = write_cluster(
        shipped_with(identity=_site(tmp_path), accounting={"default_account": "physics"})
    )
    proc = run_invoke("deploy", "--cluster", str(path), "--out", str(tmp_path / "out"))
    assert_clean_failure(proc, f"{path}: accounting.default_account: only createuser uses it")


def test_sssd_gets_the_directory_but_never_the_password(
    write_cluster, versions, tmp_path: Path
) -> None:
    path = write_cluster(shipped_with(identity=_site(tmp_path, sudo_groups=["hpc-admins"])))
    cluster = loader.load(path, versions)
    files = sssd.files(cluster.spec, path)
    conf = files[sssd.SSSD_CONF]
    assert "ldap_uri = ldaps://ldap.example.org, ldap://ldap2.example.org:3389" in conf
    assert "ldap_default_bind_dn = cn=reader,dc=example,dc=org" in conf
    assert "ldap_tls_reqcert = demand" in conf and "ldap_id_use_start_tls = true" in conf
    assert "s3cret" not in "".join(files.values())
    assert files[sssd.CA_FILE] == CA
    assert files[sssd.SUDOERS].splitlines()[1:] == ["%hpc-admins ALL=(ALL:ALL) NOPASSWD: ALL"]
    # the password is the site's own file, mounted read-only where SSSD runs, and nowhere else
    secrets = {**secret_files(tmp_path), "ldap-bind-password": tmp_path / "bind"}
    services = render.render(cluster, secrets, "sha256:abc")["services"]
    with_password = {
        name
        for name, service in services.items()
        if any("ldap-bind-password" in v for v in service.get("volumes", []))
    }
    assert with_password == {"slurmctld", "slurmdbd", "login", "cpu-0", "cpu-1"}
    assert all(
        f"{tmp_path / 'bind'}:/run/secrets/ldap-bind-password:ro" in services[s]["volumes"]
        for s in with_password
    )
    assert "slapd" not in services


def test_the_embedded_directory_runs_only_when_asked(write_cluster, versions, tmp_path) -> None:
    (tmp_path / "directory.ldif").write_text("dn: dc=example,dc=org\n")
    ldap = {"embedded": True, "base_dn": "dc=example,dc=org"}
    cluster = loader.load(
        write_cluster(shipped_with(identity={"source": "ldap", "ldap": ldap})), versions
    )
    secrets = {**secret_files(tmp_path), "ldap-bind-password": tmp_path / "ldap-bind-password"}
    services = render.render(cluster, secrets, "sha256:abc")["services"]
    assert services["slapd"]["environment"] == {"SLAPD_BASE_DN": "dc=example,dc=org"}
    # a deploy brings the directory up with the nodes, which it answers, before slurmctld;
    # an upgrade's slurmdbd, with its database (the Compose file says nothing of either)
    assert "slapd" in render.started_before(cluster, roles.CONTROLLER)
    assert set(render.started_before(cluster, roles.DBD)) == {"mariadb", "slapd"}
    assert "ldap_uri = ldap://slapd" in sssd.sssd_conf(cluster.spec)
    local = loader.load(write_cluster(shipped_with()), versions)
    services = render.render(local, secret_files(tmp_path), "sha256:abc")["services"]
    assert "slapd" not in services
    assert not any("identity" in v for s in services.values() for v in s.get("volumes", []))


@pytest.mark.parametrize(
    ("accounting", "identity_of", "expected"),
    [
        (
            {"accounts": [{"name": "physics"}], "accounts_from_groups": {"chem": "chem-users"}},
            "site",
            "accounting.accounts_from_groups.chem: no account 'chem' in accounting.accounts",
        ),
        (
            {"accounts": [{"name": "physics"}], "accounts_from_groups": {"physics": "p"}},
            "local",
            "accounting.accounts_from_groups.physics: groups come from a directory",
        ),
        (
            {"accounts_from_groups": {"physics": "bad group"}},
            "site",
            "accounting.accounts_from_groups.physics",
        ),
    ],
)
def test_a_group_maps_to_a_declared_account_of_a_directory(
    write_cluster, tmp_path: Path, accounting: dict, identity_of: str, expected: str
) -> None:
    sssd = _site(tmp_path) if identity_of == "site" else {"source": "local"}
    path = write_cluster(shipped_with(identity=sssd, accounting=accounting))
    proc = run_invoke("deploy", "--cluster", str(path), "--out", str(tmp_path / "out"))
    assert_clean_failure(proc, f"{path}: {expected}")
    assert not (tmp_path / "out").exists()


def test_ssh_into_job_nodes_can_be_turned_off_with_its_extern_steps(
    write_cluster, versions, tmp_path: Path
) -> None:
    on = loader.load(write_cluster(shipped_with()), versions)
    off = loader.load(write_cluster(shipped_with(slurm={"node_ssh": False})), versions)
    conf_on, conf_off = (slurmconf.render(c, None, False, None)["slurm.conf"] for c in (on, off))
    assert "\nPrologFlags=Contain\n" in conf_on
    assert "PrologFlags" not in conf_off
    services = render.render(off, secret_files(tmp_path), "sha256:abc")["services"]
    assert services["cpu-0"]["environment"]["SLURMFORGE_NODE_SSHD"] == "0"
    services = render.render(on, secret_files(tmp_path), "sha256:abc")["services"]
    assert "SLURMFORGE_NODE_SSHD" not in services["cpu-0"].get("environment", {})


def test_the_embedded_directory_is_refused_on_kubernetes(write_cluster, tmp_path: Path) -> None:
    (tmp_path / "directory.ldif").write_text("dn: dc=example,dc=org\n")
    ldap = {"embedded": True, "base_dn": "dc=example,dc=org"}
    path = write_cluster(shipped_with(identity={"source": "ldap", "ldap": ldap}))
    out = tmp_path / "out"
    proc = run_invoke(
        "deploy", "--target", "k8s", "--dry-run", "--cluster", str(path), "--out", str(out)
    )
    assert_clean_failure(proc, f"{path}: identity.ldap.embedded: the k8s target runs no directory")
    assert not out.exists()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
@pytest.mark.parametrize("key", ["identity.ldap.bind_password_file", "accounting.database"])
def test_a_secret_file_others_may_read_is_refused(
    write_cluster, versions, tmp_path: Path, key, mode
) -> None:
    """As ssh refuses an open private key: before anything is written or applied."""
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(mode)
    if key == "accounting.database":
        key = "accounting.database.password_secret"
        data = shipped_with(
            accounting={"database": {"host": "127.0.0.1", "password_secret": str(secret)}}
        )
    else:
        data = shipped_with(identity=_site(tmp_path, bind_password_file=str(secret)))
    path = write_cluster(data)
    out = tmp_path / "out"
    proc = run_invoke(
        "deploy", "--target", "k8s", "--dry-run", "--cluster", str(path), "--out", str(out)
    )
    assert_clean_failure(proc, f"{path}: {key}: {secret} is open to others (mode {mode:04o})")
    assert f"hint: chmod 600 {secret}" in proc.stderr
    assert not out.exists()
    secret.chmod(0o600)  # its owner's alone: taken
    loader.load(path, versions)


def test_a_site_directory_this_host_cannot_reach_is_a_note_and_nothing_refused(
    write_cluster, versions, tmp_path: Path
) -> None:
    """The deploy's bind check against a site directory that does not answer here (a port on
    this host nothing listens on): a note naming the URI, not a refusal; the nodes' SSSD keeps
    trying it."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    uri = f"ldap://127.0.0.1:{port}"
    path = write_cluster(shipped_with(identity=_site(tmp_path, uri=[uri])))
    notes = probe.probe(path, loader.load(path, versions).spec, timeout=2)
    assert len(notes) == 1, notes
    assert notes[0].startswith(f"identity.ldap.uri: {uri} does not answer from this host"), notes
