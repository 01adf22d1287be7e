"""Kubernetes tier: the default cluster deployed with `invoke deploy --target k8s` on a real API
server and kubelet.

The server is the one KUBECONFIG names (context SLURMFORGE_K8S_CONTEXT, else its current one), or,
when KUBECONFIG is unset, the lab of ../shared/k8s-lab (Kubernetes 1.20 from Debian's archive,
pods on this host's Docker): its binaries are built once per machine under
~/.cache/k8s-lab (.ci/run starts that build early, beside the image builds; a build in
progress is waited for), and it is started fresh for the tier and stopped after its last test.
On the lab, the tier also makes what a real cluster provides: hostPath PersistentVolumes for the
claims.
Images come from this host's Docker (the lab has no registry).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest

from tests.browser import browser, browsers  # noqa: F401 (the portal test's fixtures)
from tests.common import ROOT, load_yaml
from tests.k8s import lab
from tests.k8s.kube import K8sCluster, Kube


# package scope: the lab stops once the tier's last test is done, not at the session's end (an
# idle API server, etcd and kubelet, which polls the engine for its containers' state, took CPU
# from the image tier that followed in the same process, and from the other lanes)
@pytest.fixture(scope="package")
def kube() -> Iterator[Kube]:
    if os.environ.get("KUBECONFIG"):
        yield Kube(dict(os.environ), os.environ.get("SLURMFORGE_K8S_CONTEXT"))
        return
    if not lab.RECIPE.exists():
        pytest.fail(f"no Kubernetes for this tier: set KUBECONFIG, or provide {lab.RECIPE}")
    try:
        yield Kube(lab.start(), None, lab=True)
    finally:
        lab.recipe("down")


@pytest.fixture(scope="module")
def k8s_cluster(
    kube: Kube, images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[K8sCluster]:
    """The shipped cluster under a throwaway name (= its namespace), nodes overcommitted so that
    both fit a 2-core lab node."""
    root = tmp_path_factory.mktemp("k8s")
    name = f"sfk8s{uuid.uuid4().hex[:6]}"
    shutil.copytree(ROOT / "deploy" / "layers", root / "layers")
    data = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())
    data.update(name=name, kubernetes={"overcommit": True, "login_service": "ClusterIP"})
    if kube.lab:
        manifest, names = lab.volumes(root, name, data["kubernetes"])
        kube.run("apply", "-f", str(manifest), namespaced=False)
        kube.made += [f"persistentvolume/{n}" for n in names]
    kube.namespace = name
    env = {**kube.env, "SLURMFORGE_DEBUG": "", "SLURMFORGE_STATE_DIR": str(root / "state")}
    cluster = K8sCluster(kube, root, env)
    cluster.write(data)
    try:
        yield cluster
    finally:
        kube.run("delete", "namespace", name, "--wait=false", check=False, namespaced=False)
        for obj in kube.made:
            kube.run("delete", obj, "--wait=false", check=False, namespaced=False)
