"""A role's pod: its containers, volumes, and what it waits for before it starts."""

from __future__ import annotations

from typing import Any

from slurmforge import jail_contract
from slurmforge.deploy import roles
from slurmforge.deploy.k8s.objects import (
    probe,
    resources,
    secret_env,
    secret_volume,
    security,
    small_resources,
)
from slurmforge.deploy.k8s.workloads import WorkloadBuilder
from slurmforge.deploy.roles import (
    DATABASE,
    DBD,
    Role,
)


def scrape_annotations(role: Role) -> dict[str, str]:
    """The annotations a plain Prometheus' kubernetes_sd_configs relabelling conventionally
    keeps (prometheus.io/scrape, port, path), for the port ``role`` is scraped on."""
    assert role.scraped is not None
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(role.scraped.number),
        "prometheus.io/path": role.metrics_path,
    }


class PodRenderer(WorkloadBuilder):
    def service_monitor(self, role: Role) -> dict[str, Any]:
        """For a Prometheus Operator: scrape the role's Service (applied only where the API
        serves monitoring.coreos.com/v1; the Service's annotations serve a plain Prometheus)."""
        assert role.scraped is not None
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": self.meta(role.name, role.name),
            "spec": {
                "selector": {"matchLabels": self.selector(role.name)},
                "endpoints": [
                    {
                        "port": role.scraped.name,
                        "path": role.metrics_path,
                        # every scrape presents the cluster's metrics token (roles.METRICS_TOKEN)
                        "bearerTokenSecret": {
                            "name": roles.METRICS_TOKEN.secret,
                            "key": roles.METRICS_TOKEN.file,
                        },
                    }
                ],
            },
        }

    def volumes(self, role: Role) -> tuple[list[dict], list[dict]]:
        """The pod volumes and container mounts of what the role names: its secrets, config
        directories, data and the jail."""
        volumes, mounts = [], []
        for secret in role.mounted_secrets(self.spec):
            volume, mount = secret_volume(secret)
            volumes.append(volume)
            mounts.append(mount)
        for config in role.mounted_configs(self.spec):
            # 0755: the site's prolog and epilog scripts among them run as programs
            source = {"name": config.name, "defaultMode": 0o755}
            if config is roles.SLURM_CONF and roles.labelled(self.spec):
                # topology.conf beside the rest, from the ConfigMap node-watch keeps (a
                # projected volume follows changes to each, as a configMap volume does)
                both = [{"configMap": {"name": n}} for n in (config.name, roles.TOPOLOGY_CONFIG)]
                volumes.append(
                    {"name": config.name, "projected": {"sources": both, "defaultMode": 0o755}}
                )
            else:
                volumes.append({"name": config.name, "configMap": source})
            mounts.append({"name": config.name, "mountPath": config.path, "readOnly": True})
        if role.data:
            mounts.append({"name": role.data.claim, "mountPath": role.data.path})
        if role.jail:
            volumes.append(self.jail_volume())
            mount = {"name": "jail", "mountPath": jail_contract.ROOT}
            mounts.append({**mount, "readOnly": True} if role.jail == "ro" else mount)
        if role.runs_users:  # site storage, inside the jail where sessions and jobs see it
            for i, site in enumerate(self.spec.mounts):
                name = f"site-{i}"
                if site.claim:
                    source = {"persistentVolumeClaim": {"claimName": site.claim}}
                else:
                    source = {"hostPath": {"path": site.host_path, "type": "Directory"}}
                volumes.append({"name": name, **source})
                mounts.append(
                    {
                        "name": name,
                        "mountPath": f"{jail_contract.ROOT}{site.path}",
                        "readOnly": site.read_only,
                    }
                )
        return volumes, mounts

    def container(
        self,
        role: Role,
        image: str,
        mounts: list[dict],
        args: list[str] | None = None,
        env: list[dict] | None = None,
        capabilities: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """The role's container: its secrets' and config directories' variables first, then
        its own and ``env``."""
        variables = [secret_env(s) for s in role.mounted_secrets(self.spec)]
        variables += [
            {"name": var, "value": f"{c.path}/{file}"}
            for c in role.mounted_configs(self.spec)
            if c.env
            for var, file in [c.env]
        ]
        variables += [{"name": k, "value": v} for k, v in role.env(self.spec).items()]
        variables += env or []
        container: dict[str, Any] = {"name": role.container_name, "image": image}
        args = list(role.command) if args is None else args
        if args:
            container["args"] = args
        if variables:
            container["env"] = variables
        if role.ports:
            container["ports"] = [
                {"name": p.name, "containerPort": p.number, "protocol": "TCP"} for p in role.ports
            ]
        container["volumeMounts"] = mounts
        if role.probe:
            container["readinessProbe"] = probe(role.probe)
        container["securityContext"] = security(
            (*role.capabilities, *capabilities), role.runs_users, role.runs_containers
        )
        container["resources"] = resources(role.resources)
        return container

    def data_owner(self, role: Role) -> dict[str, Any]:
        """A daemon that refuses a data directory its user cannot write (slurmctld's state), on
        a new claim whose root is root's (Docker's named volumes copy the image's owner; a PVC
        does not): the pod hands it over first, with CAP_CHOWN alone."""
        data = role.data
        assert data is not None and data.owner
        return {
            "name": f"{data.claim}-owner",
            "image": self.images.refs[role.image],
            "command": ["chown", data.owner, data.path],
            "volumeMounts": [{"name": data.claim, "mountPath": data.path}],
            "securityContext": {**security(("CHOWN",)), "runAsUser": 0},
            "resources": small_resources(),
        }

    def wait_for_database(self) -> dict[str, Any]:
        """slurmdbd exits when its database does not answer: its pod waits for the port first."""
        db = self.spec.accounting.database
        port = roles.role(DATABASE).ports[0].number
        host, port = (db.host, db.port) if db else (DATABASE, port)
        return {
            "name": "wait-for-database",
            "image": self.images.refs[DBD],
            "command": [
                "/bin/bash",
                "-c",
                f"until (exec 3<>/dev/tcp/{host}/{port}) 2>/dev/null; do "
                f"echo 'waiting for the database at {host}:{port}'; sleep 2; done",
            ],
            "securityContext": security(()),
            "resources": small_resources(),
        }
