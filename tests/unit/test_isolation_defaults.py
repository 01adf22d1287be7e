"""The defaults that keep users out of each other's data, as the generated files say them, the keys
a site opens them with, and the bad values of those keys refused in one line. (tests/cluster/
test_isolation.py acts as the users on a cluster.)"""

from __future__ import annotations

import re

import pytest

from slurmforge.deploy import loader, monitoring, portal, roles
from slurmforge.deploy.local import render
from slurmforge.deploy.slurm import accounts
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.versions import load as load_versions
from tests.common import ROOT
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


def test_the_database_and_prometheus_are_off_the_users_network(
    write_cluster, versions, tmp_path
) -> None:
    """MariaDB is off the network users' sessions and jobs share with the daemons: on a network
    of its own with slurmdbd (Compose, internal), behind a NetworkPolicy on Kubernetes. Prometheus
    is on the management network alone, with the exporter it scrapes; the metrics token is
    readable by Prometheus' added group, and every scrape presents it."""
    cluster = loader.load(write_cluster(shipped_with()), versions)
    data = render.render(cluster, secret_files(tmp_path), "sha256:abc")
    services = data["services"]
    assert services["mariadb"]["networks"] == ["database"]
    assert services["slurmdbd"]["networks"] == ["default", "database"]
    assert services["prometheus"]["networks"] == ["management"]
    assert services["exporter"]["networks"] == ["default", "management"]
    apart = ("mariadb", "slurmdbd", "prometheus", "exporter")
    on_default = [n for n in services if n not in apart]
    assert on_default and all("networks" not in services[n] for n in on_default)
    assert data["networks"] == {"database": {"internal": True}, "management": {}}
    token = f"{secret_files(tmp_path)['metrics-token']}:/run/secrets/metrics-token:ro"
    readers = {n for n, s in services.items() if token in s["volumes"]}
    assert readers == {"prometheus", "exporter"}
    assert services["prometheus"]["group_add"] == [str(roles.METRICS_TOKEN.group)]
    jobs = monitoring.prometheus_config(cluster, [])["scrape_configs"]
    assert jobs and all(
        j["authorization"] == {"type": "Bearer", "credentials_file": "/run/secrets/metrics-token"}
        for j in jobs
    )
    # an external database: nothing to keep apart, and slurmdbd reaches it as before
    external = shipped_with(
        accounting={"database": {"host": "db.example", "password_secret": str(tmp_path / "pw")}}
    )
    (tmp_path / "pw").write_text("secret")
    (tmp_path / "pw").chmod(0o600)
    data = render.render(
        loader.load(write_cluster(external), versions), secret_files(tmp_path), "sha256:abc"
    )
    assert "mariadb" not in data["services"] and "networks" not in data["services"]["slurmdbd"]
    assert data["networks"] == {"management": {}}


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions In/NotIn) selects ``labels``."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        inside = labels.get(expr["key"]) in expr["values"]
        if inside != (expr["operator"] == "In"):
            return False
    return True


def _admitted(policies: list[dict], to: dict, source: dict | None, port: int) -> bool:
    """What a network plugin that enforces NetworkPolicies decides for a connection to a pod
    labelled ``to`` on ``port`` from a pod of the namespace labelled ``source`` (None: from
    outside the namespace): admitted unless a policy selects the pod, and then by one of them."""
    selecting = [p["spec"] for p in policies if _selects(p["spec"]["podSelector"], to)]
    if not selecting:
        return True
    for spec in selecting:
        for rule in spec.get("ingress", []):
            sources = [f["podSelector"] for f in rule.get("from", [{"podSelector": {}}])]
            from_ok = "from" not in rule or (
                source is not None and any(_selects(s, source) for s in sources)
            )
            port_ok = "ports" not in rule or any(r["port"] == port for r in rule["ports"])
            if from_ok and port_ok:
                return True
    return False


def test_on_kubernetes_each_pod_takes_connections_from_its_zone_alone(checkout) -> None:
    """The policies as a network plugin that enforces them would apply them (the lab's does not):
    every pod of the cluster is covered; the database answers slurmdbd alone; the daemons and the
    nodes answer the cluster's pods; from outside, only the published ports and the exporter's
    (whose scrapes present the metrics token)."""
    kube = rendered_kube(*checkout)
    kube.manifests.validate()  # against the API's own schemas
    objects = kube.manifests.objects.values()
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    pods = {}
    for o in objects:
        spec = o["spec"]["jobTemplate"]["spec"] if o["kind"] == "CronJob" else o.get("spec", {})
        if "template" in spec:
            pods[o["metadata"]["name"]] = spec["template"]["metadata"]["labels"]
    assert {"slurmctld", "cpu", "login", "mariadb", "slurmdbd", "exporter"} <= set(pods)
    for name, labels in pods.items():  # nothing of the cluster runs unselected
        assert any(_selects(p["spec"]["podSelector"], labels) for p in policies), name
    db, dbd, login, node = pods["mariadb"], pods["slurmdbd"], pods["login"], pods["cpu"]
    assert _admitted(policies, db, dbd, 3306)
    assert not any(_admitted(policies, db, src, 3306) for src in (login, node, None))
    assert _admitted(policies, pods["slurmctld"], node, 6817)
    assert _admitted(policies, node, pods["slurmctld"], 6818)
    assert _admitted(policies, node, login, 40000)  # srun's and MPI's ports
    assert _admitted(policies, dbd, login, 6819)  # sacct
    assert not _admitted(policies, pods["slurmctld"], None, 6817)
    assert not _admitted(policies, node, None, 6818)
    assert not _admitted(policies, dbd, None, 6819)
    assert _admitted(policies, login, None, 22)
    assert _admitted(policies, pods["slurmrestd"], None, 6820)
    assert _admitted(policies, pods["exporter"], None, 9341)
    assert not _admitted(policies, pods["exporter"], None, 22)
    # another cluster's pods in the namespace are another's: none of these select them
    other = {**node, "app.kubernetes.io/instance": "someone-else"}
    assert not any(_selects(p["spec"]["podSelector"], other) for p in policies)
