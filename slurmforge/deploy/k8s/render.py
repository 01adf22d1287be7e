"""The `k8s` target's renderer (k8s_run.py runs it): the roles a cluster runs (roles.py), as a
kustomize directory.

One file per object plus ``kustomization.yaml``, under ``deploy/out/k8s/<cluster>/``:

- the Namespace, a ConfigMap per configuration directory the roles mount, and the jail: a
  ReadWriteMany PVC and a populate Job named after the jail image's digest, so it runs once per
  digest (every pod that mounts the jail waits in an init container until the jail records that
  digest);
- per role: a StatefulSet when it keeps data (a volumeClaimTemplate per ``Data``) or is reached
  by a stable pod name (slurmctld-0, login-0, mariadb-0), else a one-pod Deployment; a headless
  Service for the ports other pods reach it on, a Service of ``kubernetes.login_service``'s type
  for the ports it publishes; a CronJob for a scheduled role (the GPU health check);
- the compute nodes: one StatefulSet per node set behind one headless Service (``slurm-nodes``):
  pod ``cpu-0`` is Slurm node ``cpu-0`` at ``cpu-0.slurm-nodes``; GPU node sets request
  ``nvidia.com/gpu`` and mount the node's driver directories through hostPath, read-only.

No secret is rendered: `invoke deploy --target k8s` creates each of roles.SECRETS the cluster
uses as a Secret (generated there once, never written to the repository, the directory or an
image; an external database's password from its file) and pods mount them by name, each only
where a role names it. Every container drops all capabilities and adds back only its role's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from slurmforge import jail_contract
from slurmforge.config import GNU_TYPES
from slurmforge.deploy import monitoring, roles
from slurmforge.deploy.backup import take as backup
from slurmforge.deploy.identity import sssd as identity
from slurmforge.deploy.k8s.objects import (
    ObjectBuilder,
    arch_affinity,
    claim,
    files_digest,
    probe,
    resources,
    secret_env,
    secret_volume,
    security,
    small_resources,
    usr_claim,
)
from slurmforge.deploy.roles import (
    BACKUP,
    BACKUP_CONF,
    CONTROLLER,
    CONTROLLER_STATE,
    DATABASE,
    DB_PASSWORD,
    DBD,
    DBD_CONF,
    HEALTH_CHECK,
    IDENTITY_CONF,
    JAIL_CONF,
    NODE,
    SLURM_CONF,
    Role,
)
from slurmforge.deploy.slurm import conf as slurmconf
from slurmforge.deploy.spec.model import Cluster, NodeSet

NODES_SERVICE = "slurm-nodes"
# the scheduled backups' claim, and where the backup pod mounts it
BACKUPS_CLAIM, BACKUPS_DIR = "backups", "/var/backups/slurmforge"
# a node pod's preStop (drain, wait for the jobs, then DOWN); the seconds of the grace period it
# leaves slurmd and the kubelet after it
NODE_STATE, STOP_MARGIN = "/usr/lib/slurmforge/node-state", 5
DRIVER_ROOT = "/run/nvidia/driver"  # where GPU pods see the node's driver directories


def driver_dirs(arch: str) -> tuple[str, ...]:
    """The node's driver directories a GPU pod mounts, relative to gpu.driver_root."""
    return (f"usr/lib/{GNU_TYPES[arch]}", "usr/bin")


class ManifestRenderer(ObjectBuilder):
    def render(self, pyxis: bool) -> dict[str, dict[str, Any]]:
        """File name → object, in apply order (kustomize sorts by kind anyway)."""
        network = slurmconf.Network(
            controller=f"{CONTROLLER}-0",
            controller_addr=f"{CONTROLLER}-0.{CONTROLLER}",
            node_domain=NODES_SERVICE,
        )
        running = roles.running(self.spec, "k8s")
        # The pods' config-hash annotation rolls every pod (and kills its jobs) when the config
        # it mounts changes, except for the node counts: `invoke scale` (and a redeploy with
        # other replicas) hands running pods the new node list live (Kube.sync_config, then
        # `scontrol reconfigure`), so the hash is taken over the config of one node per set.
        configs = self.configs(self.cluster, running, pyxis, network)
        # nor for the site's own settings, scripts and topology: reconfigure applies them live
        shapes = self.configs(one_per_set(self.cluster), running, pyxis, network, site=False)
        objects: dict[str, dict[str, Any]] = {"namespace.yaml": self.namespace_object()}
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
        files = slurmconf.render(cluster, None, pyxis, network, site)
        content = {
            SLURM_CONF.name: files,
            JAIL_CONF.name: {k: files[k] for k in slurmconf.JAIL_FILES},
            DBD_CONF.name: {"slurmdbd.conf": slurmconf.slurmdbd_conf(cluster)},
            IDENTITY_CONF.name: identity.files(cluster.spec, cluster.path),
        }
        used = {c for r in running for c in r.mounted_configs(cluster.spec)}
        if BACKUP_CONF in used:
            plan = backup.plan(cluster, cluster.cell.slurm)
            content[BACKUP_CONF.name] = {"plan.json": plan.dump()}
        return {c.name: content[c.name] for c in roles.CONFIGS if c in used}

    # -- a role's objects --------------------------------------------------------------------

    def role_objects(self, role: Role, config_hash: str) -> dict[str, dict[str, Any]]:
        if role.workload == "nodes":
            out = {f"service-{NODES_SERVICE}.yaml": self.headless(NODES_SERVICE, NODE, role.ports)}
            for ns in self.spec.nodesets:
                out[f"statefulset-{ns.name}.yaml"] = self.node_set(role, ns, config_hash)
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
            out[f"service-{role.name}.yaml"]["metadata"]["annotations"] = scrape_annotations(
                role.scraped
            )
            out[f"servicemonitor-{role.name}.yaml"] = self.service_monitor(role.name, role.scraped)
        if outside:
            out[f"service-{role.name}.yaml"] = self.published(role.name, outside)
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
        if role.data or role.stable_name:
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

    def service_monitor(self, name: str, port: roles.Port) -> dict[str, Any]:
        """For a Prometheus Operator: scrape the role's Service (applied only where the API
        serves monitoring.coreos.com/v1; the Service's annotations serve a plain Prometheus)."""
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": self.meta(name, name),
            "spec": {
                "selector": {"matchLabels": self.selector(name)},
                "endpoints": [{"port": port.name, "path": "/metrics"}],
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

    def job(self, role: Role, arch: str | None = None) -> dict[str, Any]:
        """The jail populate, named after everything that defines it: a Job's template cannot
        change, so a changed jail.keep, image or digest makes a new Job (and the same inputs the
        same Job, which a redeploy leaves alone). With ``arch``: that arch's jail /usr, copied
        on a node of that arch into its own claim."""
        extra: dict[str, Any] = {}
        if arch is None:
            populate = jail_contract.populate_env(self.images.jail_digest, self.spec.kept)
            image = self.images.refs[role.image]
            volumes, mounts = self.volumes(role)
        else:
            digest = self.images.usr_digests[arch]
            populate = jail_contract.populate_env(digest, (), usr_only=True)
            image = self.images.refs[self.cluster.image_key(role.image, arch)]
            volumes = [self.jail_volume(arch)]
            mounts = [{"name": usr_claim(arch), "mountPath": jail_contract.ROOT}]
            extra["affinity"] = arch_affinity(arch)
        container = self.container(
            role, image, mounts, env=[{"name": k, "value": v} for k, v in populate.items()]
        )
        pod = self.pod_spec([container], volumes, wait=False, restartPolicy="OnFailure", **extra)
        spec = {
            "backoffLimit": 4,
            "template": {"metadata": {"labels": self.labels(role.name)}, "spec": pod},
        }
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        name = role.name if arch is None else f"{role.name}-usr-{arch}"
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self.meta(f"{name}-{digest[:12]}", role.name),
            "spec": spec,
        }

    def scheduled(self, role: Role, config_hash: str) -> dict[str, Any]:
        """The GPU health check: the jail's gpu-check as a job step on every GPU node in
        service, as `invoke gpu-check` runs it: srun inside the jail, from a pod set up like the
        login node. A node below the threshold drains itself; nodes it drained are resumed by
        `invoke gpu-check`, which reserves them first."""
        assert role.name == HEALTH_CHECK
        steps = []
        for ns in (ns for ns in self.spec.nodesets if ns.gpus):
            part = next(p.name for p in self.spec.partitions if ns.name in p.nodesets)
            steps.append(
                f"srun -p {part} -N {ns.replicas} --ntasks-per-node=1 --exclusive "
                f"--gres=gpu:{ns.gpus} -t 30 "
                f"/opt/slurmforge/gpu-check --min-busbw {self.spec.gpu.min_busbw:g}"
            )
        volumes, mounts = self.volumes(role)
        # the image's entrypoint starts munged and makes the jail's runtime mounts first
        args = ["chroot", jail_contract.ROOT, "/bin/bash", "-c", "\n".join(steps)]
        container = self.container(role, self.images.refs[role.image], mounts, args=args)
        pod = self.pod_spec([container], volumes, restartPolicy="Never")
        schedule = self.k8s.health_check.schedule
        return self.cron_job(role.name, schedule, pod, config_hash)

    def scheduled_backup(self, role: Role, config_hash: str) -> dict[str, dict[str, Any]]:
        """`invoke backup` on kubernetes.backup.schedule, from inside: a pod beside slurmctld
        (on its node: StateSave's claim is ReadWriteOnce) that mounts StateSave and the jail
        read-only and the secrets, dumps the database over the network as slurmdbd's user, and
        writes the archive to a claim of its own, keeping the newest kubernetes.backup.keep."""
        settings = self.k8s.backup
        assert role.name == BACKUP and settings.schedule is not None
        volumes, mounts = self.volumes(role)
        state = CONTROLLER_STATE
        volumes += [
            {
                "name": state.claim,
                "persistentVolumeClaim": {
                    "claimName": f"{state.claim}-{CONTROLLER}-0",
                    "readOnly": True,
                },
            },
            {"name": BACKUPS_CLAIM, "persistentVolumeClaim": {"claimName": BACKUPS_CLAIM}},
        ]
        mounts += [
            {"name": state.claim, "mountPath": state.path, "readOnly": True},
            {"name": BACKUPS_CLAIM, "mountPath": BACKUPS_DIR},
        ]
        command = [
            "slurmforge-backup",
            f"{BACKUP_CONF.path}/plan.json",
            *("--out", BACKUPS_DIR, "--keep", str(settings.keep)),
        ]
        if roles.own_database(self.spec):
            command += ["--db-host", DATABASE, "--db-user", roles.OWN_DB_USER,
                        "--db-password-file", DB_PASSWORD.path]  # fmt: skip
        container = self.container(role, self.images.refs[role.image], mounts, args=[])
        container["command"] = command
        beside = {
            "labelSelector": {"matchLabels": self.selector(CONTROLLER)},
            "topologyKey": "kubernetes.io/hostname",
        }
        affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [beside]}}
        pod = self.pod_spec([container], volumes, restartPolicy="Never", affinity=affinity)
        claim_ = claim(self.meta(BACKUPS_CLAIM, BACKUP), "ReadWriteOnce", settings)
        return {
            f"pvc-{BACKUPS_CLAIM}.yaml": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                **claim_,
            },
            f"cronjob-{role.name}.yaml": self.cron_job(
                role.name, settings.schedule, pod, config_hash
            ),
        }

    # -- the compute nodes -------------------------------------------------------------------

    def node_set(self, role: Role, ns: NodeSet, config_hash: str) -> dict[str, Any]:
        volumes, mounts = self.volumes(role)
        arch = self.cluster.arch(ns)
        usr_arch = None if arch == self.cluster.cell.arch else arch
        if usr_arch:  # the jail, as nodes of its arch see it: with that arch's /usr
            volumes.append(self.jail_volume(usr_arch))
            mounts.insert(mounts.index({"name": "jail", "mountPath": jail_contract.ROOT}) + 1,
                          self.usr_mount(usr_arch))  # fmt: skip
        env = [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *({"name": k, "value": v} for k, v in sorted(ns.env.items())),
        ]
        limits = {
            "cpu": str(ns.cpus),
            "memory": f"{ns.memory_mb}Mi",
            **({"nvidia.com/gpu": str(ns.gpus)} if ns.gpus else {}),
        }
        if ns.gpus:
            root = self.spec.gpu.driver_root.rstrip("/")
            for i, sub in enumerate(driver_dirs(arch)):
                volumes.append(
                    {
                        "name": f"driver-{i}",
                        "hostPath": {"path": f"{root}/{sub}", "type": "Directory"},
                    }
                )
                mounts.append(
                    {"name": f"driver-{i}", "mountPath": f"{DRIVER_ROOT}/{sub}", "readOnly": True}
                )
            env.append({"name": "SLURMFORGE_DRIVER_ROOT", "value": DRIVER_ROOT})
        # preStop waits for the jobs up to the grace period, less a margin for slurmd's own stop
        grace = self.k8s.node_grace_seconds
        env.append({"name": "NODE_STATE_GRACE", "value": str(max(grace - STOP_MARGIN, 0))})
        args = ["$(POD_NAME)" if a == "{node}" else a for a in role.command]
        image = self.images.refs[self.cluster.image_key(ns.image, arch)]
        container = self.container(role, image, mounts, args, env, ns.capabilities)
        container["resources"] = {"requests": self.node_requests(limits), "limits": limits}
        # a pod being deleted drains its node and lets its jobs finish within the grace period;
        # those still running then end as on a lost node (images/slurmd/node-state)
        container["lifecycle"] = {"preStop": {"exec": {"command": [NODE_STATE, "stopping"]}}}
        extra: dict[str, Any] = {}
        terms: list[dict[str, Any]] = []
        for e in ns.affinity.matchExpressions:
            terms.append({"key": e.key, "operator": e.operator})
            if e.values:
                terms[-1]["values"] = list(e.values)
        if ns.arch is not None:  # its arch's nodes, which pull its arch's image
            extra["affinity"] = arch_affinity(ns.arch, terms)
        elif terms:
            extra["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": terms}]
                    }
                }
            }
        # the pod's pause process is PID 1 and reaps what slurmd does not: each slurmstepd
        # daemonizes (its parent exits), so its exit would leave a zombie under a slurmd PID 1
        extra["shareProcessNamespace"] = True
        pod = self.pod_spec([container], volumes, usr_arch=usr_arch, **extra)
        pod["terminationGracePeriodSeconds"] = grace
        return self.stateful_set(
            ns.name,
            NODE,
            ns.replicas,
            pod,
            config_hash,
            service=NODES_SERVICE,
            **{"slurmforge.io/nodeset": ns.name},
        )

    def node_requests(self, limits: dict[str, str]) -> dict[str, str]:
        """What a node pod requests: its limits, or with kubernetes.overcommit next to nothing
        (GPUs are never overcommitted)."""
        if not self.k8s.overcommit:
            return dict(limits)
        return {**limits, "cpu": "100m", "memory": "128Mi"}


def scrape_annotations(port: roles.Port) -> dict[str, str]:
    """The annotations a plain Prometheus' kubernetes_sd_configs relabelling conventionally
    keeps (prometheus.io/scrape, port, path)."""
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port.number),
        "prometheus.io/path": "/metrics",
    }


def one_per_set(cluster: Cluster) -> Cluster:
    """``cluster`` with every node set at one node: its shape without its size."""
    nodesets = tuple(ns.model_copy(update={"replicas": 1}) for ns in cluster.spec.nodesets)
    return dataclasses.replace(cluster, spec=cluster.spec.model_copy(update={"nodesets": nodesets}))
