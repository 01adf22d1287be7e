"""The web portal's part of the cluster file (``portal:``): JupyterHub, where users log in with the
cluster's own identities and start JupyterLab as a Slurm job in the jail (deploy/portal.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictInt

from slurmforge.deploy.spec.fields import AbsPath, DNSName
from slurmforge.deploy.spec.nodeset import Duration
from slurmforge.inputs import Model


class PortalForm(Model):
    """What the start form offers first; a user may ask for less or more, up to what the chosen
    partition's node sets have."""

    partition: DNSName | None = None  # the cluster's default partition when not given
    cpus: Annotated[StrictInt, Field(ge=1)] = 1
    memory_mb: Annotated[StrictInt, Field(ge=64)] = 1024
    time: Annotated[Duration, Field(ge=60, le=366 * 86400)] = 3600  # the job's time limit
    gpus: Annotated[StrictInt, Field(ge=0)] = 0


class PortalSpec(Model):
    enabled: StrictBool = False
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 8000  # published on the login address
    # a notebook server without activity this long is stopped, and its job with it
    # (jupyterhub-idle-culler); 0: never
    idle_timeout: Annotated[Duration, Field(ge=0, le=30 * 86400)] = 3600
    # a server whose job has not started (and answered) this long after "Start" is given up,
    # its job cancelled; the hub shows the job's pending reason meanwhile
    start_timeout: Annotated[Duration, Field(ge=30, le=86400)] = 300
    form: PortalForm = PortalForm()
    # a PEM file (mode 0600) with the certificate the portal serves over TLS, its chain, and
    # its private key (`cat cert.pem chain.pem key.pem`); none: the first deploy makes a
    # self-signed one, kept with the cluster's secrets, and each deploy prints its fingerprint
    tls_pem: AbsPath | None = None
