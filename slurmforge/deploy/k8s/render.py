"""The `k8s` target's renderer (k8s/run.py runs it): the roles a cluster runs (roles/), as a
kustomize directory.

One file per object plus ``kustomization.yaml``, under ``deploy/out/k8s/<cluster>/``:

- the Namespace, a ConfigMap per configuration directory the roles mount, and the jail: a
  ReadWriteMany PVC and a populate Job named after the jail image's digest, so it runs once per
  digest (every pod that mounts the jail waits in an init container until the jail records that
  digest);
- per role: a StatefulSet when it keeps data (a volumeClaimTemplate per ``Data``) or is reached
  by a stable pod name (slurmctld-0, login-0, mariadb-0), else a one-pod Deployment; a headless
  Service for the ports other pods reach it on, a Service of ``kubernetes.login_service``'s type
  for the ports it publishes (``<role>-public`` where it has both: public_service); a CronJob
  for a scheduled role (the GPU health check);
- the compute nodes: one StatefulSet per node set behind one headless Service (``slurm-nodes``):
  pod ``cpu-0`` is Slurm node ``cpu-0`` at ``cpu-0.slurm-nodes``; GPU node sets request
  ``nvidia.com/gpu`` and mount the node's driver directories through hostPath, read-only;
- the NetworkPolicies that admit connections to the cluster's pods (policies.py).

No secret is rendered: `invoke deploy --target k8s` creates each of roles.SECRETS the cluster
uses as a Secret (generated there once, never written to the repository, the directory or an
image; an external database's password from its file) and pods mount them by name, each only
where a role names it. Every container drops all capabilities and adds back only its role's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from slurmforge.deploy import monitoring, portal, roles
from slurmforge.deploy.backup import take
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.k8s import controllers
from slurmforge.deploy.k8s.jobs import JobRenderer
from slurmforge.deploy.k8s.node_watch import WatchRenderer
from slurmforge.deploy.k8s.nodesets import NODES_SERVICE, NodeSetRenderer
from slurmforge.deploy.k8s.objects import (
    claim,
    files_digest,
    usr_claim,
)
from slurmforge.deploy.k8s.pods import scrape_annotations
from slurmforge.deploy.k8s.policies import PolicyRenderer
from slurmforge.deploy.k8s.power import PowerRenderer
from slurmforge.deploy.roles import (
    BACKUP,
    BACKUP_CONF,
    CONTROLLER,
    DBD,
    DBD_CONF,
    IDENTITY_CONF,
    JAIL_CONF,
    NODE,
    PORTAL_CONF,
    SLURM_CONF,
    Role,
)
from slurmforge.deploy.slurm import conf
from slurmforge.deploy.spec.model import Cluster


class ManifestRenderer(JobRenderer, NodeSetRenderer, PowerRenderer, WatchRenderer, PolicyRenderer):
    """Every object of the cluster: the configs, the jail, and each running role's, through the
    renderer of its family (pods.py, jobs.py, nodesets.py)."""

    def render(self, pyxis: bool) -> dict[str, dict[str, Any]]:
        """File name → object, in apply order (kustomize sorts by kind anyway)."""
        network = conf.Network(controllers=controllers.hosts(self.spec), node_domain=NODES_SERVICE)
        running = roles.running(self.spec, "k8s")
        # The pods' config-hash annotation rolls every pod (and kills its jobs) when the config
        # it mounts changes, except for the node counts: `invoke scale` (and a redeploy with
        # other replicas) hands running pods the new node list live (config_sync.py, then
        # `scontrol reconfigure`), so the hash is taken over the config of one node per set.
        configs = self.configs(self.cluster, running, pyxis, network)
        # nor for the site's own settings, scripts and topology: reconfigure applies them live
        shapes = self.configs(one_per_set(self.cluster), running, pyxis, network, site=False)
        objects: dict[str, dict[str, Any]] = {"namespace.yaml": self.namespace_object()}
        # before any pod: none runs a moment without them
        objects.update(self.network_policies(running))
        if roles.labelled(self.spec):  # node-watch's to keep from here on (apply.py)
            topology = {"topology.conf": configs[SLURM_CONF.name].pop("topology.conf")}
            objects[f"configmap-{roles.TOPOLOGY_CONFIG}.yaml"] = self.config_map(
                roles.TOPOLOGY_CONFIG, topology
            )
        for name, files in configs.items():
            objects[f"configmap-{name}.yaml"] = self.config_map(name, files)
        objects["pvc-jail.yaml"] = self.jail_claim()
        for arch in self.cluster.other_arches:  # the /usr that node sets of that arch see
            objects[f"pvc-{usr_claim(arch)}.yaml"] = self.jail_claim(arch)
        # the populate Job right after its claim: every other pod waits for what it copies
        for role in sorted(running, key=lambda r: r.workload != "job"):
            mounted: dict[str, str] = {}
            for config in role.mounted_configs(self.spec):
                mounted.update(shapes[config.name])
            objects.update(self.role_objects(role, files_digest(mounted) if mounted else ""))
        if self.spec.metrics.enabled:
            objects["prometheusrule-slurm-alerts.yaml"] = {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PrometheusRule",
                "metadata": self.meta("slurm-alerts", roles.EXPORTER),
                "spec": monitoring.rules(self.cluster),
            }
        return objects

    def configs(
        self, cluster: Cluster, running: list[Role], pyxis: bool, network, site: bool = True
    ) -> dict:
        """ConfigDir name → its files, for the directories the roles mount."""
        files = conf.render(cluster, None, pyxis, network, site)
        content = {
            SLURM_CONF.name: files,
            JAIL_CONF.name: {k: files[k] for k in conf.JAIL_FILES},
            DBD_CONF.name: {"slurmdbd.conf": conf.slurmdbd_conf(cluster)},
            IDENTITY_CONF.name: sssd.files(cluster.spec, cluster.path),
            PORTAL_CONF.name: portal.files(cluster, node_domain=NODES_SERVICE),
        }
        used = {c for r in running for c in r.mounted_configs(cluster.spec)}
        if BACKUP_CONF in used:
            plan = take.plan(cluster, cluster.cell.slurm, scheduled=True)
            content[BACKUP_CONF.name] = {"plan.json": plan.dump()}
        return {c.name: content[c.name] for c in roles.CONFIGS if c in used}

    # -- a role's objects --------------------------------------------------------------------

    def role_objects(self, role: Role, config_hash: str) -> dict[str, dict[str, Any]]:
        if role.workload == "nodes":
            out = {f"service-{NODES_SERVICE}.yaml": self.headless(NODES_SERVICE, NODE, role.ports)}
            for ns in self.spec.nodesets:
                out[f"statefulset-{ns.name}.yaml"] = self.node_set(role, ns, config_hash)
                if ns.replicas:
                    out[f"poddisruptionbudget-{ns.name}.yaml"] = self.disruption_budget(ns)
                for node in ns.elastic_nodes:
                    out[f"deployment-{node}.yaml"] = self.elastic_node(role, ns, node, config_hash)
            return out
        if role.workload == "job":
            jobs = [self.job(role), *(self.job(role, a) for a in self.cluster.other_arches)]
            return {f"job-{job['metadata']['name']}.yaml": job for job in jobs}
        if role.workload == "schedule" and role.name == BACKUP:
            return self.scheduled_backup(role, config_hash)
        if role.workload == "schedule":
            return {f"cronjob-{role.name}.yaml": self.scheduled(role, config_hash)}
        out = {}
        inside = [p for p in role.ports if not p.publish]
        outside = [p for p in role.ports if p.publish]
        if inside:
            out[f"service-{role.name}.yaml"] = self.headless(role.name, role.name, inside)
        if role.scraped:
            out[f"service-{role.name}.yaml"]["metadata"]["annotations"] = scrape_annotations(role)
            out[f"servicemonitor-{role.name}.yaml"] = self.service_monitor(role)
        if outside:
            name = public_service(role)
            out[f"service-{name}.yaml"] = self.published(name, outside, role.name)
        volumes, mounts = self.volumes(role)
        container = self.container(role, self.images.refs[role.image], mounts)
        pod = self.pod_spec([container], volumes, wait=role.jail is not None)
        if role.data and role.data.owner:
            pod["initContainers"].append(self.data_owner(role))
        if role.fixed_hostname:
            pod["hostname"] = role.name
        if role.name == DBD:
            pod["initContainers"].append(self.wait_for_database())
        if role.grace_seconds is not None:
            pod["terminationGracePeriodSeconds"] = role.grace_seconds
        if role.name == CONTROLLER and roles.elastic(self.spec):
            self.with_node_power(pod, self.images.refs[roles.role(roles.NODE_POWER).image])
            out.update(self.power_access())
        if role.name == roles.NODE_WATCH:
            self.with_watch_token(pod)
            out.update(self.watch_access())
        if role.name == CONTROLLER and controllers.shared(self.spec):
            out.update(self.shared_controllers(role, pod, config_hash))
        elif role.data or role.stable_name:
            claims = []
            if role.data:
                metadata = {"name": role.data.claim, "labels": self.labels(role.name)}
                volume = getattr(self.k8s, role.data.setting)
                claims.append(claim(metadata, "ReadWriteOnce", volume))
            set_ = self.stateful_set(role.name, role.name, 1, pod, config_hash, claims)
            out[f"statefulset-{role.name}.yaml"] = set_
        else:
            out[f"deployment-{role.name}.yaml"] = self.deployment(role.name, pod, config_hash)
        return out

    def shared_controllers(self, role: Role, pod: dict[str, Any], config_hash: str):
        """A primary and a backup slurmctld: one StatefulSet of two, both on one ReadWriteMany
        claim for StateSaveLocation, each preferring a node the other is not on."""
        assert role.data is not None
        state = self.meta(controllers.SHARED_STATE_CLAIM, role.name)
        source = {"claimName": controllers.SHARED_STATE_CLAIM}
        pod["volumes"].append({"name": role.data.claim, "persistentVolumeClaim": source})
        pod["affinity"] = controllers.anti_affinity(self.selector(role.name))
        replicas = len(controllers.pods(self.spec))
        # the pair requests the CPU one controller does (the backup stands by until it takes
        # over; each keeps its limit), so that adding a backup fits where one controller did
        requests = pod["containers"][0]["resources"]["requests"]
        requests["cpu"] = f"{int(requests['cpu'].removesuffix('m')) // replicas}m"
        return {
            f"pvc-{controllers.SHARED_STATE_CLAIM}.yaml": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                **claim(state, "ReadWriteMany", self.k8s.state),
            },
            f"statefulset-{role.name}.yaml": self.stateful_set(
                role.name, role.name, replicas, pod, config_hash
            ),
        }


def public_service(role: Role) -> str:
    """The Service users reach ``role`` through: its own name, or ``<role>-public`` beside the
    headless Service of a role that other pods reach on ports of their own (the portal: users
    on its proxy, notebook servers on its hub's API)."""
    inside = any(not p.publish for p in role.ports)
    return f"{role.name}-public" if inside else role.name


def one_per_set(cluster: Cluster) -> Cluster:
    """``cluster`` with every node set at one node: its shape without its size."""
    nodesets = tuple(ns.model_copy(update={"replicas": 1}) for ns in cluster.spec.nodesets)
    return dataclasses.replace(cluster, spec=cluster.spec.model_copy(update={"nodesets": nodesets}))
