"""The web portal's part of the cluster file (``portal:``): JupyterHub, where users log in with the
cluster's own identities and start JupyterLab as a Slurm job in the jail (deploy/portal.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictInt

from slurmforge.deploy.spec.fields import AbsPath, DNSName
from slurmforge.deploy.spec.nodeset import Duration
from slurmforge.inputs import Model

# the notebook servers' environment in the jail image (images/jail, images/jupyter)
NOTEBOOK_VENV = "/usr/lib/slurmforge/jupyter"
NOTEBOOK_PATHS = (NOTEBOOK_VENV, "/usr/local/bin/jupyter", "/usr/local/bin/jupyter-lab")


class PortalForm(Model):
    """What the start form offers first; a user may ask for less or more, up to what the chosen
    partition's node sets have."""

    partition: DNSName | None = None
    """The cluster's default partition when not given"""
    cpus: Annotated[StrictInt, Field(ge=1)] = 1
    """CPUs the form offers first."""
    memory_mb: Annotated[StrictInt, Field(ge=64)] = 1024
    """Memory (MiB) the form offers first."""
    time: Annotated[Duration, Field(ge=60, le=366 * 86400)] = 3600
    """The job's time limit"""
    gpus: Annotated[StrictInt, Field(ge=0)] = 0
    """GPUs the form offers first."""


class PortalSpec(Model):
    enabled: StrictBool = False
    """Run the web portal (JupyterHub, each user's JupyterLab a Slurm job)."""
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 8000
    """Published on the login address"""
    idle_timeout: Annotated[Duration, Field(ge=0, le=30 * 86400)] = 3600
    """A notebook server without activity this long is stopped, and its job with it
    (jupyterhub-idle-culler); 0: never"""
    start_timeout: Annotated[Duration, Field(ge=30, le=86400)] = 300
    """A server whose job has not started (and answered) this long after "Start" is given up, its
    job cancelled; the hub shows the job's pending reason meanwhile"""
    form: PortalForm = PortalForm()
    """What the start form offers first."""
    tls_pem: AbsPath | None = None
    """A PEM file (mode 0600) with the certificate the portal serves over TLS, its chain, and its
    private key (`cat cert.pem chain.pem key.pem`); none: the first deploy makes a self-signed
    one, kept with the cluster's secrets, and each deploy prints its fingerprint"""

    @property
    def jail_skip(self) -> tuple[str, ...]:
        """What a populate leaves out of the jail: the notebook servers' environment (360 MB,
        about a third of the jail's files), where no portal starts them."""
        return () if self.enabled else NOTEBOOK_PATHS
