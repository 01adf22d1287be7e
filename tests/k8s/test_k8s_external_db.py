"""The k8s target with an external database (one the site runs outside the cluster, here a
container on the lab's host): no MariaDB of the cluster's own, slurmdbd stores into the site's,
and a password the site rotates (server and file) reaches slurmdbd through a redeploy."""

from __future__ import annotations

import pytest

from tests import external_database
from tests.k8s.kube import K8sCluster, sacct, submit

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def site_database(images, client, tmp_path_factory):
    with external_database.run(client, images["mariadb"], tmp_path_factory.mktemp("site")) as db:
        yield db


def test_an_external_database_takes_the_records_and_follows_its_password(
    k8s_cluster: K8sCluster, site_database
) -> None:
    data = k8s_cluster.data()
    data["accounting"] = {"database": site_database.spec()}
    k8s_cluster.write(data)
    proc = k8s_cluster.deploy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kube = k8s_cluster.kube
    assert kube.run("get", "statefulsets", "-o", "name").split() == [
        "statefulset.apps/cpu",
        "statefulset.apps/login",
        "statefulset.apps/slurmctld",
    ]
    kube.sh("login-0", "login", "chroot /jail createuser --non-interactive alice")
    job = submit(kube, "--wait --wrap true")
    assert sacct(kube, [job]) == {job: ("COMPLETED", "0:0")}
    assert job in site_database.jobs(k8s_cluster.data()["name"])

    site_database.change_password()
    proc = k8s_cluster.deploy()  # the Secret follows the file; slurmdbd restarts with it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"replaced Secret {kube.namespace}/db-password (from " in proc.stderr, proc.stderr
    kube.run("rollout", "status", "deployment/slurmdbd", "--timeout=300s")
    again = submit(kube, "--wait --wrap true")
    assert sacct(kube, [again], timeout=180) == {again: ("COMPLETED", "0:0")}
    assert again in site_database.jobs(k8s_cluster.data()["name"])
