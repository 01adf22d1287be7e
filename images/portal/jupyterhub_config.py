"""The portal's hub configuration: the logic is slurmforge_portal's; the cluster's settings are the
deploy's portal.yaml (mounted from the generated configuration)."""

import os
from pathlib import Path

import yaml
from slurmforge_portal import configure

c = get_config()  # noqa: F821 (JupyterHub's config loader defines it)
settings = Path(os.environ.get("PORTAL_SETTINGS", "/etc/slurmforge/portal/portal.yaml"))
configure(c, yaml.safe_load(settings.read_text()))
