"""The defaults that keep users out of each other's data, as the generated files say them, the keys
a site opens them with, and the bad values of those keys refused in one line. (tests/cluster/
test_isolation.py acts as the users on a cluster.)"""

from __future__ import annotations

import re

import pytest

from slurmforge.deploy import loader, portal
from slurmforge.deploy.local import render as local_render
from slurmforge.deploy.slurm import accounts
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.versions import load as load_versions
from tests.conftest import ROOT
from tests.unit.helpers import assert_clean_failure, run_invoke, secret_files, shipped_with
from tests.unit.kube import rendered_kube


@pytest.fixture
def versions():
    return load_versions(ROOT / "versions.yaml")


def _lines(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"{key}=")]


def test_by_default_users_see_only_their_own_and_jobs_need_an_association(
    write_cluster, versions
) -> None:
    cluster = loader.load(write_cluster(shipped_with()), versions)
    files = slurmconf.render(cluster)
    conf = files["slurm.conf"]
    assert _lines(conf, "PrivateData") == ["PrivateData=accounts,jobs,usage,users"]
    assert _lines(conf, "AccountingStorageEnforce") == [
        "AccountingStorageEnforce=associations,limits,qos,safe"
    ]
    (alt,) = _lines(conf, "AuthAltParameters")
    assert alt.endswith(",max_token_lifespan=3600"), alt
    dbd = slurmconf.slurmdbd_conf(cluster)
    assert _lines(dbd, "PrivateData") == ["PrivateData=accounts,jobs,usage,users"]
    # createuser's home mode, and the notebook servers' umask, in the files that carry them
    assert "home_mode=0700\n" in files["slurmforge.conf"]
    assert portal.settings(cluster)["umask"] == "0077"


def test_a_site_may_open_the_cluster_and_its_homes(write_cluster, versions) -> None:
    data = shipped_with(
        slurm={"private_data": []},
        accounting={"enforce": [], "max_token_lifespan": "P1D"},
        identity={"home_mode": 0o750},  # YAML's unquoted 0750
    )
    cluster = loader.load(write_cluster(data), versions)
    files = slurmconf.render(cluster)
    assert _lines(files["slurm.conf"], "PrivateData") == []
    assert _lines(files["slurm.conf"], "AccountingStorageEnforce") == []
    assert "max_token_lifespan=86400" in files["slurm.conf"]
    assert _lines(slurmconf.slurmdbd_conf(cluster), "PrivateData") == []
    assert "home_mode=0750\n" in files["slurmforge.conf"]
    assert portal.settings(cluster)["umask"] == "0027"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"slurm": {"private_data": ["jobs", "secrets"]}},
            "slurm.private_data[1]: Input should be 'accounts', 'cloud'",
        ),
        (
            {"accounting": {"max_token_lifespan": "1h"}},
            "accounting.max_token_lifespan: expected a duration as ISO 8601 writes it",
        ),
        ({"accounting": {"max_token_lifespan": 5}}, "accounting.max_token_lifespan: Input"),
        ({"accounting": {"max_token_lifespan": "P2Y"}}, "accounting.max_token_lifespan: "),
        ({"identity": {"home_mode": "0755"}}, "identity.home_mode: Input should be '0700' or"),
        (
            {"jail": {"scratch": ["/scratch", "/scratch/deep"]}},
            "jail.scratch: expected scratch directories apart from each other",
        ),
    ],
)
def test_bad_isolation_settings_are_refused_in_one_line(
    write_cluster, changes: dict, expected: str
) -> None:
    path = write_cluster(shipped_with(**changes))
    assert_clean_failure(run_invoke("deploy", "--cluster", str(path)), f"{path}: {expected}")


def test_directory_member_names_reach_sacctmgr_as_single_arguments(write_cluster, versions) -> None:
    """A name a directory's group lists is one word to the shell in slurmctld, whatever it
    holds; one that is no user name is reported and left out."""
    data = shipped_with(
        identity={"source": "ldap", "ldap": {"uri": ["ldap://dir"], "base_dn": "dc=x"}},
        accounting={"accounts": [{"name": "lab"}], "accounts_from_groups": {"lab": "lab-users"}},
    )
    cluster = loader.load(write_cluster(data), versions)
    evil = "x;touch /pwned"
    ran: list[str] = []

    def sh(command: str) -> tuple[int, str]:
        ran.append(command)
        if command.startswith("getent group"):
            return 0, f"lab-users:*:5000:ada,{evil},$(id),bob.smith\n"
        return 0, ""

    report = accounts.members(cluster, sh)
    added = [c for c in ran if "add user" in c]
    assert added == ["sacctmgr -i add user ada,bob.smith account=lab"], ran
    assert not any("touch" in c or "$(id)" in c for c in ran), ran
    assert re.search(r"left out members of lab-users .*'x;touch /pwned'", report[0]), report


def test_the_database_is_reached_by_slurmdbd_alone(write_cluster, versions, tmp_path) -> None:
    """MariaDB is off the network users' sessions and jobs share with the daemons: on a network
    of its own with slurmdbd (Compose, internal), behind a NetworkPolicy on Kubernetes."""
    cluster = loader.load(write_cluster(shipped_with()), versions)
    data = local_render.render(cluster, secret_files(tmp_path), "sha256:abc")
    services = data["services"]
    assert services["mariadb"]["networks"] == ["database"]
    assert services["slurmdbd"]["networks"] == ["default", "database"]
    on_default = [n for n, s in services.items() if n not in ("mariadb", "slurmdbd")]
    assert on_default and all("networks" not in services[n] for n in on_default)
    assert data["networks"] == {"database": {"internal": True}}
    # an external database: nothing to keep apart, and slurmdbd reaches it as before
    external = shipped_with(
        accounting={"database": {"host": "db.example", "password_secret": str(tmp_path / "pw")}}
    )
    (tmp_path / "pw").write_text("secret")
    (tmp_path / "pw").chmod(0o600)
    data = local_render.render(
        loader.load(write_cluster(external), versions), secret_files(tmp_path), "sha256:abc"
    )
    assert "mariadb" not in data["services"] and "networks" not in data["services"]["slurmdbd"]
    assert "networks" not in data


def test_on_kubernetes_the_database_takes_connections_from_slurmdbd_alone(checkout) -> None:
    kube = rendered_kube(*checkout)
    kube.manifests.validate()  # against the API's own schemas
    policies = [o for o in kube.manifests.objects.values() if o["kind"] == "NetworkPolicy"]
    (policy,) = policies
    assert policy["metadata"]["name"] == "mariadb"
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "mariadb"
    (rule,) = spec["ingress"]
    assert [
        p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in rule["from"]
    ] == ["slurmdbd"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 3306}]
