"""The workloads that run pods, the Services in front of them and the jail's claims and
volumes, as every role family's renderer makes them."""

from __future__ import annotations

import shlex
from typing import Any

from slurmforge import jail_contract
from slurmforge.deploy import roles
from slurmforge.deploy.k8s.objects import (
    JAIL_CLAIM,
    ObjectBuilder,
    claim,
    security,
    small_resources,
    usr_claim,
)
from slurmforge.deploy.roles import (
    JAIL,
)


class WorkloadBuilder(ObjectBuilder):
    def jail_claim(self, arch: str | None = None) -> dict[str, Any]:
        """The jail's claim; with ``arch``, the claim of that arch's /usr."""
        name = JAIL_CLAIM if arch is None else usr_claim(arch)
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            **claim(self.meta(name, JAIL), "ReadWriteMany", self.k8s.jail),
        }

    def jail_volume(self, arch: str | None = None) -> dict[str, Any]:
        """The jail's volume; with ``arch``, that of that arch's /usr."""
        if arch is None:
            return {"name": "jail", "persistentVolumeClaim": {"claimName": JAIL_CLAIM}}
        return {"name": usr_claim(arch), "persistentVolumeClaim": {"claimName": usr_claim(arch)}}

    def usr_mount(self, arch: str, read_only: bool = False) -> dict[str, Any]:
        """Another arch's /usr over the jail's, as that arch's nodes see the jail."""
        mount = {"name": usr_claim(arch), "mountPath": jail_contract.ROOT + jail_contract.USR}
        return {**mount, "readOnly": True} if read_only else mount

    def wait_for_jail(self, arch: str | None = None) -> dict[str, Any]:
        """An init container that holds the pod until the jail holds this digest's populate
        (and, on a node of another ``arch``, the jail's /usr for it holds that arch's)."""
        skip = self.spec.skipped
        done = jail_contract.record(self.images.jail_digest, skip)
        waits = [(jail_contract.sentinel(jail_contract.ROOT), done)]
        mounts = [{"name": "jail", "mountPath": jail_contract.ROOT, "readOnly": True}]
        image = self.images.refs[JAIL]
        if arch is not None:
            usr = jail_contract.ROOT + jail_contract.USR
            done = jail_contract.record(self.images.usr_digests[arch], skip)
            waits.append((jail_contract.sentinel(usr), done))
            mounts.append(self.usr_mount(arch, read_only=True))
            image = self.images.refs[self.cluster.image_key(JAIL, arch)]
        script = "; ".join(
            f"until grep -qxF {shlex.quote(digest)} {marker} 2>/dev/null; do "
            f"echo 'waiting for the jail populate of {digest[:19]}'; sleep 1; done"
            for marker, digest in waits
        )
        return {
            "name": "wait-for-jail",
            "image": image,
            "command": ["/bin/sh", "-c", script],
            "volumeMounts": mounts,
            "securityContext": security(()),
            "resources": small_resources(),
        }

    def pod_spec(
        self,
        containers: list[dict],
        volumes: list[dict],
        wait: bool = True,
        usr_arch: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """``wait``: hold the pod until the jail is populated (all but populate mount it);
        ``usr_arch``: and its /usr for that arch (a node of another arch than the jail's)."""
        spec: dict[str, Any] = {
            **({"initContainers": [self.wait_for_jail(usr_arch)]} if wait else {}),
            "containers": containers,
            "volumes": volumes,
            "enableServiceLinks": False,
            # no pod here talks to the Kubernetes API: none gets a service-account token
            "automountServiceAccountToken": False,
            **extra,
        }
        if self.k8s.image_pull_secrets:
            spec["imagePullSecrets"] = [{"name": n} for n in self.k8s.image_pull_secrets]
        return spec

    def headless(self, name: str, component: str, ports: list[roles.Port]) -> dict[str, Any]:
        """Pods found by name, each at its own address (slurmctld's ``<pod>.<service>``, the
        nodes', slurmdbd's and MariaDB's, which are reconnected to by name after a restart)."""
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(name, component),
            "spec": {
                "clusterIP": "None",
                # slurmctld resolves every node when it starts, ready or not
                "publishNotReadyAddresses": True,
                "selector": self.selector(component),
                "ports": [
                    {"name": p.name, "port": p.number, "targetPort": p.number, "protocol": "TCP"}
                    for p in ports
                ],
            },
        }

    def published(
        self, name: str, ports: list[roles.Port], component: str | None = None
    ) -> dict[str, Any]:
        """Where users reach a role (``component``, else ``name``): a Service of
        kubernetes.login_service's type."""
        component = component or name
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(name, component),
            "spec": {
                "type": self.k8s.login_service,
                "selector": self.selector(component),
                "ports": [
                    {
                        "name": p.name,
                        "port": p.service_port or roles.published(self.spec, p),
                        "targetPort": p.number,
                        "protocol": "TCP",
                    }
                    for p in ports
                ],
            },
        }

    def stateful_set(
        self,
        name: str,
        component: str,
        replicas: int,
        pod: dict[str, Any],
        config_hash: str,
        claims: list[dict[str, Any]] | None = None,
        service: str | None = None,
        **extra: str,
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "serviceName": service or name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": self.selector(component, **extra)},
            "template": self.template(component, pod, config_hash, **extra),
        }
        if claims:
            spec["volumeClaimTemplates"] = claims
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": self.meta(name, component, **extra),
            "spec": spec,
        }

    def deployment(self, name: str, pod: dict[str, Any], config_hash: str) -> dict[str, Any]:
        """One pod of a stateless daemon, replaced (never doubled) on a change."""
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.meta(name, name),
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": self.selector(name)},
                "template": self.template(name, pod, config_hash),
            },
        }

    def cron_job(
        self, name: str, schedule: str, pod: dict[str, Any], config_hash: str
    ) -> dict[str, Any]:
        return {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": self.meta(name, name),
            "spec": {
                "schedule": schedule,
                "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 3,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": {
                    "spec": {"backoffLimit": 0, "template": self.template(name, pod, config_hash)}
                },
            },
        }
