"""The web portal's software: the hub image (JupyterHub, batchspawner, the idle culler, Debian's
configurable-http-proxy, and the cluster client's SPANK plugins for its sbatch) and the jail's
JupyterLab, each exactly what its lock file pins."""

from __future__ import annotations

import re

import docker

from tests.common import ROOT


def _name(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


def _pins(lock: str) -> dict[str, str]:
    text = (ROOT / lock).read_text()
    return {_name(k): v for k, v in re.findall(r"^([a-z0-9._-]+)==(\S+)", text, re.M)}


def _run(client: docker.DockerClient, image: str, script: str) -> str:
    out = client.containers.run(image, ["bash", "-c", script], entrypoint=[], remove=True)
    return out.decode()


def test_the_hub_image_has_its_lock_and_the_clusters_client(client, images) -> None:
    pins = _pins("images/portal/jupyterhub.lock")
    script = (
        "jupyterhub --version; configurable-http-proxy --version; "
        "python3 -c 'import batchspawner, jupyterhub_idle_culler; print(\"imports\")'; "
        "python3 -m pip freeze --all; ls /usr/lib/slurmforge/spank; "
        "test ! -e /run/secrets/portal-cookie-secret && echo no-secret"
    )
    out = _run(client, images["portal"], script).splitlines()
    assert out[0] == pins["jupyterhub"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", out[1]), out[1]  # Debian's proxy answers
    assert "imports" in out and "no-secret" in out
    frozen = dict(line.split("==", 1) for line in out if "==" in line)
    assert {_name(k): v for k, v in frozen.items()} == pins
    assert "jail.so" in out  # sbatch loads plugstack.conf's plugins, as every client does


def test_the_jail_carries_jupyterlab_for_the_portals_servers(client, images) -> None:
    pins = _pins("images/jail/jupyterlab.lock")
    script = (
        "jupyter-lab --version; "
        "jupyter server extension list 2>&1 | grep -c 'jupyterlab_slurm.*OK'; "
        "/usr/lib/slurmforge/jupyter/bin/python -c 'import sys; print(sys.version.split()[0])'; "
        "python3 -c 'import sys; print(sys.version.split()[0])'; "
        "ls /usr/lib/slurmforge/jupyter/bin/batchspawner-singleuser "
        "/usr/lib/slurmforge/jupyter/bin/jupyterhub-singleuser"
    )
    version, slurm_extension, venv_python, jail_python, *wrappers = _run(
        client, images["jail"], script
    ).splitlines()
    assert version == pins["jupyterlab"]
    assert slurm_extension == "1"
    assert venv_python == jail_python  # kernels run the jail's own Python
    assert len(wrappers) == 2
