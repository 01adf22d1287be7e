"""The `k8s` target's renderer (k8s_run.py runs it): the same cluster model as `local`, as a
kustomize directory.

One file per object plus ``kustomization.yaml``, under ``deploy/out/k8s/<cluster>/``:

- Namespace; ConfigMaps with the nodes' and the jail's Slurm configuration;
- the jail: a ReadWriteMany PVC and a populate Job named after the jail image's digest, so it
  runs once per digest (every pod that mounts the jail waits in an init container until the
  jail records that digest);
- slurmctld: StatefulSet + headless Service + a state PVC (volumeClaimTemplate);
- one StatefulSet per node set behind one headless Service (``slurm-nodes``): pod ``cpu-0`` is
  Slurm node ``cpu-0`` at ``cpu-0.slurm-nodes``; GPU node sets request ``nvidia.com/gpu`` and mount
  the node's driver directories through hostPath, read-only;
- login: StatefulSet + Service (LoadBalancer, NodePort or ClusterIP);
- with accounting: slurmdbd as a Deployment (one pod, its host name fixed to ``slurmdbd``, as
  DbdHost says) behind a headless Service, its slurmdbd.conf (no password) in a ConfigMap; unless
  the cluster names an external database, MariaDB as a StatefulSet with a ReadWriteOnce claim
  (``data-mariadb-0``) behind a headless Service;
- with the REST API: slurmrestd as a Deployment behind a Service of the login's type, on
  ``rest.port``;
- the GPU health check as a CronJob, when a node set has GPUs.

No secret is rendered (SECRETS): `invoke deploy --target k8s` creates the munge key, the JWT key
and the database password as Secrets in the cluster (generated there once, never written to the
repository, the directory or an image; an external database's password from its file) and pods
mount them by name, each only where it is used. Images are pinned by digest when
build/images.lock.json (written by `invoke push`) has them. Every container drops all
capabilities and adds back only what its role needs (see CAPABILITIES).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmforge import jail_contract
from slurmforge.deploy import generated, slurmconf
from slurmforge.deploy.model import (
    CONTROLLER,
    DATABASE,
    DBD,
    JAIL,
    LOGIN,
    NODE_CAPABILITIES,
    RESTD,
    Cluster,
    NodeSet,
)
from slurmforge.errors import ConfigError

PART_OF = "slurmforge"
NODES_SERVICE = "slurm-nodes"


@dataclass(frozen=True)
class SecretFile:
    """A secret file the images read (state.SECRETS names them) as a Secret: one key, the file's
    name, mounted read-only in a directory of its own, which collides with nothing the runtime
    mounts (/run/secrets would: the service-account token goes below /var/run/secrets); the
    image finds it through ``env``."""

    file: str
    secret: str
    env: str
    dir: str

    @property
    def env_var(self) -> dict[str, str]:
        return {"name": self.env, "value": f"{self.dir}/{self.file}"}


MUNGE = SecretFile("munge.key", "munge-key", "MUNGE_KEY_FILE", "/etc/slurmforge/munge")
# signs and checks tokens (slurmctld, slurmdbd)
JWT = SecretFile("jwt_hs256.key", "jwt-key", "JWT_KEY_FILE", "/etc/slurmforge/jwt")
DB_PASSWORD = SecretFile("db-password", "db-password", "DB_PASSWORD_FILE", "/etc/slurmforge/db")
SECRETS = {s.file: s for s in (MUNGE, JWT, DB_PASSWORD)}
MUNGE_SECRET, MUNGE_DIR, MUNGE_ENV = MUNGE.secret, MUNGE.dir, MUNGE.env_var
NODE_CONFIG, JAIL_CONFIG, DBD_CONFIG = "slurm-config", "slurm-jail-config", "slurmdbd-config"
DBD_CONF_DIR = "/etc/slurmforge/slurmdbd"  # slurmdbd.conf without its password
DATABASE_DIR = "/var/lib/mysql"
DATABASE_CLAIM = f"data-{DATABASE}-0"  # the volumeClaimTemplate "data" of pod mariadb-0
JAIL_CLAIM = "jail"
POPULATE = "jail-populate"
HEALTH_CHECK = "gpu-health-check"
SLURMCTLD_PORT, SLURMD_PORT, DBD_PORT, DATABASE_PORT, RESTD_PORT = 6817, 6818, 6819, 3306, 6820
PSA_MODES = ("enforce", "audit", "warn")
# seconds between readiness probes (cheap execs): a daemon that starts after a wait (slurmctld
# for slurmdbd) is seen ready within this, and deploy's rollout waits end as soon
PROBE_PERIOD = 3
# a node pod's preStop (drain, wait for the jobs, then DOWN); the seconds of the grace period it
# leaves slurmd and the kubelet after it
NODE_STATE, STOP_MARGIN = "/usr/lib/slurmforge/node-state", 5
DRIVER_ROOT = "/run/nvidia/driver"  # where GPU pods see the node's driver directories
# the node's driver directories a GPU pod mounts, relative to gpu.driver_root
DRIVER_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/bin")
# What each role's processes do that needs a capability (all others are dropped):
# the entrypoint installs the munge key for the munge user (CHOWN, FOWNER, DAC_OVERRIDE) and
# starts munged as that user (SETUID, SETGID); Slurm daemons start processes as users and
# signal them (SETUID, SETGID, KILL); the jail plugin and sshd chroot (SYS_CHROOT); populate
# copies a root filesystem with its owners, modes and file capabilities.
DAEMON = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")
CAPABILITIES: dict[str, tuple[str, ...]] = {
    CONTROLLER: DAEMON,
    # + the node set's own (the base layer adds SYS_ADMIN)
    "node": (*DAEMON, "SYS_CHROOT", *NODE_CAPABILITIES),
    LOGIN: (*DAEMON, "AUDIT_WRITE", "NET_BIND_SERVICE", "SYS_ADMIN", "SYS_CHROOT"),
    POPULATE: ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD", "SETFCAP"),
    HEALTH_CHECK: (*DAEMON, "SYS_ADMIN", "SYS_CHROOT"),  # the login's jail mounts, chroot
    # slurmdbd starts as root, writes its config for SlurmUser and becomes it; slurmrestd is
    # started as its own account (runuser); MariaDB's first start makes its data directory
    # mysql's, then the server becomes mysql
    DBD: DAEMON,
    RESTD: DAEMON,
    DATABASE: ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"),
}


@dataclass(frozen=True)
class Images:
    """component → the reference pods pull (by digest when the lock has it), and the jail's id."""

    refs: dict[str, str]
    jail_digest: str


def resolve_images(
    cluster: Cluster, lock: dict[str, str], local_ids: dict[str, str] | None = None
) -> Images:
    """Image references moved to ``kubernetes.registry`` and pinned by digest from ``lock``.

    The jail digest names the populate Job: the pushed digest when locked, else the local image
    id (``local_ids``); neither is an error that says which command makes one.
    """
    from slurmforge import push  # here: it brings the Docker SDK, which rendering does not need

    old = cluster.images[CONTROLLER].rsplit("/", 1)[0]  # the set's registry prefix
    registry = cluster.spec.kubernetes.registry
    moved = {c: push.retarget(ref, old, registry) for c, ref in cluster.images.items()}
    refs = {c: f"{m.rsplit(':', 1)[0]}@{lock[m]}" if m in lock else m for c, m in moved.items()}
    jail = lock.get(moved[JAIL]) or (local_ids or {}).get(JAIL)
    if not jail:
        raise ConfigError(
            f"image {cluster.images[JAIL]} (jail) is neither pushed nor built",
            hint=f"run: {cluster.build_hint}, then invoke push",
        )
    return Images(refs, jail)


class ManifestRenderer:
    def __init__(self, cluster: Cluster, images: Images, namespace: str | None = None) -> None:
        self.cluster = cluster
        self.spec = cluster.spec
        self.k8s = cluster.spec.kubernetes
        self.images = images
        self.namespace = namespace or self.k8s.namespace or cluster.name
        self.version = cluster.cell.slurm
        self.gpu_node_sets = [ns for ns in self.spec.nodesets if ns.gpus]

    # -- helpers -----------------------------------------------------------------------------

    def labels(self, component: str, **extra: str) -> dict[str, str]:
        return {
            **self.selector(component),
            "app.kubernetes.io/version": self.version,
            "app.kubernetes.io/part-of": PART_OF,
            "app.kubernetes.io/managed-by": "slurmforge",
            **extra,
        }

    def selector(self, component: str, **extra: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "slurm",
            "app.kubernetes.io/instance": self.cluster.name,
            "app.kubernetes.io/component": component,
            **extra,
        }

    def meta(self, name: str, component: str, **extra: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": self.labels(component, **extra),
        }

    @staticmethod
    def security(
        caps: tuple[str, ...], runs_users: bool = False, runs_containers: bool = False
    ) -> dict[str, Any]:
        """Only ``caps``. ``runs_users``: the container runs users' sessions or jobs, whose
        setuid programs (su, sudo, ping in the jail) need privilege escalation; the API server
        also refuses allowPrivilegeEscalation: false next to SYS_ADMIN. ``runs_containers``:
        jobs start containers (enroot through pyxis), whose pivot_root(2) inside a user
        namespace the runtime's default seccomp profile refuses, so none is applied, as on a
        bare-metal node."""
        capabilities: dict[str, list[str]] = {"drop": ["ALL"]}
        if caps:
            capabilities["add"] = sorted(set(caps))
        return {
            "allowPrivilegeEscalation": runs_users or "SYS_ADMIN" in caps,
            "privileged": False,
            "capabilities": capabilities,
            "seccompProfile": {"type": "Unconfined" if runs_containers else "RuntimeDefault"},
        }

    def pod_annotations(self, containers: list[dict[str, Any]], config_hash: str) -> dict[str, str]:
        # AppArmor's default profile denies mount(2), which SYS_ADMIN holders here need; the
        # annotation works from Kubernetes 1.4 on (the securityContext field only from 1.30).
        out = {"slurmforge.io/config-hash": config_hash} if config_hash else {}
        for c in containers:
            if "SYS_ADMIN" in c["securityContext"]["capabilities"].get("add", ()):
                out[f"container.apparmor.security.beta.kubernetes.io/{c['name']}"] = "unconfined"
        return out

    @staticmethod
    def secret_volume(secret: SecretFile) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Secret's volume (its one file, root's alone) and its read-only mount."""
        volume = {
            "name": secret.secret,
            "secret": {
                "secretName": secret.secret,
                "defaultMode": 0o400,
                "items": [{"key": secret.file, "path": secret.file}],
            },
        }
        return volume, {"name": secret.secret, "mountPath": secret.dir, "readOnly": True}

    def config_volumes(
        self, jail_conf: bool = True, slurm_conf: bool = True
    ) -> tuple[list[dict], list[dict]]:
        """The munge key, the nodes' Slurm config (``slurm_conf``), the jail's (``jail_conf``)."""
        volume, mount = self.secret_volume(MUNGE)
        volumes, mounts = [volume], [mount]
        if slurm_conf:
            volumes.append({"name": "slurm-config", "configMap": {"name": NODE_CONFIG}})
            mounts.append({"name": "slurm-config", "mountPath": "/etc/slurm", "readOnly": True})
        if jail_conf:
            volumes.append({"name": "slurm-jail-config", "configMap": {"name": JAIL_CONFIG}})
            mounts.append(
                {"name": "slurm-jail-config", "mountPath": slurmconf.JAIL_CONF, "readOnly": True}
            )
        return volumes, mounts

    def jail_volume(self) -> dict[str, Any]:
        return {"name": "jail", "persistentVolumeClaim": {"claimName": JAIL_CLAIM}}

    def wait_for_jail(self) -> dict[str, Any]:
        """An init container that holds the pod until the jail holds this digest's populate."""
        marker = jail_contract.sentinel(slurmconf.JAIL_ROOT)
        digest = shlex.quote(self.images.jail_digest)
        script = (
            f"until grep -qxF {digest} {marker} 2>/dev/null; do "
            f"echo 'waiting for the jail populate of {self.images.jail_digest[:19]}'; sleep 1; done"
        )
        return {
            "name": "wait-for-jail",
            "image": self.images.refs[JAIL],
            "command": ["/bin/sh", "-c", script],
            "volumeMounts": [{"name": "jail", "mountPath": slurmconf.JAIL_ROOT, "readOnly": True}],
            "securityContext": self.security(()),
            "resources": small_resources(),
        }

    def pod_spec(
        self, containers: list[dict], volumes: list[dict], wait: bool = True, **extra: Any
    ) -> dict[str, Any]:
        """``wait``: hold the pod until the jail is populated (all but populate mount it)."""
        spec: dict[str, Any] = {
            **({"initContainers": [self.wait_for_jail()]} if wait else {}),
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

    @staticmethod
    def claim(metadata: dict[str, Any], mode: str, volume) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "accessModes": [mode],
            "resources": {"requests": {"storage": volume.size}},
        }
        if volume.storage_class:
            spec["storageClassName"] = volume.storage_class
        return {"metadata": metadata, "spec": spec}

    # -- objects -----------------------------------------------------------------------------

    def render(self, pyxis: bool) -> dict[str, dict[str, Any]]:
        """File name → object, in apply order (kustomize sorts by kind anyway)."""
        network = slurmconf.Network(
            controller=f"{CONTROLLER}-0",
            controller_addr=f"{CONTROLLER}-0.{CONTROLLER}",
            node_domain=NODES_SERVICE,
        )
        files = slurmconf.render(self.cluster, None, pyxis, network)
        # The pods' config-hash annotation rolls every pod (and kills its jobs) when the config
        # changes, except for the node counts: `invoke scale` (and a redeploy with other
        # replicas) hands running pods the new node list live (Kube.sync_config, then
        # `scontrol reconfigure`), so the hash is taken over the config of one node per set.
        config_hash = files_digest(
            slurmconf.render(one_per_set(self.cluster), None, pyxis, network)
        )
        job = self.populate_job()
        objects: dict[str, dict[str, Any]] = {
            "namespace.yaml": {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.namespace, "labels": self.namespace_labels()},
            },
            "configmap-slurm-config.yaml": self.config_map(NODE_CONFIG, files),
            "configmap-slurm-jail-config.yaml": self.config_map(
                JAIL_CONFIG, {k: files[k] for k in slurmconf.JAIL_FILES}
            ),
            "pvc-jail.yaml": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                **self.claim(self.meta(JAIL_CLAIM, JAIL), "ReadWriteMany", self.k8s.jail),
            },
            f"job-{job['metadata']['name']}.yaml": job,
            "service-slurmctld.yaml": self.headless(CONTROLLER, CONTROLLER, SLURMCTLD_PORT),
            "statefulset-slurmctld.yaml": self.controller(config_hash),
            f"service-{NODES_SERVICE}.yaml": self.headless(NODES_SERVICE, "node", SLURMD_PORT),
        }
        for ns in self.spec.nodesets:
            objects[f"statefulset-{ns.name}.yaml"] = self.node_set(ns, config_hash)
        objects["service-login.yaml"] = self.login_service()
        objects["statefulset-login.yaml"] = self.login(config_hash)
        accounting = self.spec.accounting
        if accounting.enabled:
            dbd_conf = {"slurmdbd.conf": slurmconf.slurmdbd_conf(self.cluster)}
            objects[f"configmap-{DBD_CONFIG}.yaml"] = self.config_map(DBD_CONFIG, dbd_conf)
            if accounting.database is None:
                objects[f"service-{DATABASE}.yaml"] = self.headless(
                    DATABASE, DATABASE, DATABASE_PORT, port_name="mysql"
                )
                objects[f"statefulset-{DATABASE}.yaml"] = self.database()
            objects[f"service-{DBD}.yaml"] = self.headless(DBD, DBD, DBD_PORT)
            objects[f"deployment-{DBD}.yaml"] = self.slurmdbd(files_digest(dbd_conf))
        if self.spec.rest.enabled:
            objects[f"service-{RESTD}.yaml"] = self.rest_service()
            objects[f"deployment-{RESTD}.yaml"] = self.slurmrestd(config_hash)
        if self.gpu_node_sets and self.k8s.health_check.enabled:
            objects[f"cronjob-{HEALTH_CHECK}.yaml"] = self.health_check(config_hash)
        return objects

    def namespace_labels(self) -> dict[str, str]:
        """Pod Security Admission: the compute and login pods add SYS_ADMIN and run without
        seccomp/AppArmor confinement (the jail's mounts, users' containers), which only the
        `privileged` level admits; `baseline` and `restricted` would refuse them. Servers older
        than 1.23 ignore the labels."""
        level = {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in PSA_MODES}
        return {**self.labels("namespace"), **level}

    def config_map(self, name: str, files: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": self.meta(name, "config"),
            "data": dict(sorted(files.items())),
        }

    def populate_job(self) -> dict[str, Any]:
        """The jail populate, named after everything that defines it: a Job's template cannot
        change, so a changed jail.keep, image or digest makes a new Job (and the same inputs the
        same Job, which a redeploy leaves alone)."""
        container = {
            "name": POPULATE,
            "image": self.images.refs[JAIL],
            "args": [slurmconf.JAIL_ROOT],
            "env": [
                {"name": k, "value": v}
                for k, v in jail_contract.populate_env(
                    self.images.jail_digest, self.spec.jail.kept
                ).items()
            ],
            "volumeMounts": [{"name": "jail", "mountPath": slurmconf.JAIL_ROOT}],
            "securityContext": self.security(CAPABILITIES[POPULATE]),
            "resources": {
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "limits": {"cpu": "2", "memory": "2Gi"},
            },
        }
        pod = self.pod_spec(
            [container], [self.jail_volume()], wait=False, restartPolicy="OnFailure"
        )
        spec = {
            "backoffLimit": 4,
            "template": {"metadata": {"labels": self.labels(POPULATE)}, "spec": pod},
        }
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self.meta(f"{POPULATE}-{digest[:12]}", POPULATE),
            "spec": spec,
        }

    def headless(
        self, name: str, component: str, port: int, port_name: str = "slurm"
    ) -> dict[str, Any]:
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
                "ports": [{"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"}],
            },
        }

    def controller(self, config_hash: str) -> dict[str, Any]:
        volumes, mounts = self.config_volumes(jail_conf=False)
        env = [MUNGE_ENV]
        if self.spec.accounting.enabled:  # slurmctld checks tokens (scontrol token signs them)
            volume, mount = self.secret_volume(JWT)
            volumes.append(volume)
            mounts.append(mount)
            env.append(JWT.env_var)
        container = {
            "name": CONTROLLER,
            "image": self.images.refs[CONTROLLER],
            "args": ["slurmctld", "-D"],
            "env": env,
            "ports": [{"name": "slurmctld", "containerPort": SLURMCTLD_PORT, "protocol": "TCP"}],
            "volumeMounts": [
                *mounts,
                {"name": "state", "mountPath": slurmconf.STATE_DIR},
                # read-only: users and groups come from the jail's /etc (libnss-extrausers)
                {"name": "jail", "mountPath": slurmconf.JAIL_ROOT, "readOnly": True},
            ],
            # slurmctld is up (a TCP probe would log an error for every empty connection)
            "readinessProbe": pid_probe("/var/run/slurmctld.pid"),
            "securityContext": self.security(CAPABILITIES[CONTROLLER]),
            "resources": {
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "limits": {"cpu": "2", "memory": "2Gi"},
            },
        }
        pod = self.pod_spec([container], [*volumes, self.jail_volume()])
        pod["initContainers"].append(self.state_owner())
        metadata = {"name": "state", "labels": self.labels(CONTROLLER)}
        claim = self.claim(metadata, "ReadWriteOnce", self.k8s.state)
        return self.stateful_set(CONTROLLER, CONTROLLER, 1, pod, config_hash, [claim])

    def state_owner(self) -> dict[str, Any]:
        """slurmctld refuses a state directory SlurmUser cannot write, and a new volume's root is
        root's (Docker's named volumes copy the image's owner; a PVC does not): the pod hands it
        to SlurmUser first, with CAP_CHOWN alone."""
        return {
            "name": "state-owner",
            "image": self.images.refs[CONTROLLER],
            "command": ["chown", "slurm:slurm", slurmconf.STATE_DIR],
            "volumeMounts": [{"name": "state", "mountPath": slurmconf.STATE_DIR}],
            "securityContext": {**self.security(("CHOWN",)), "runAsUser": 0},
            "resources": small_resources(),
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
            "template": {
                "metadata": {
                    "labels": self.labels(component, **extra),
                    "annotations": self.pod_annotations(pod["containers"], config_hash),
                },
                "spec": pod,
            },
        }
        if claims:
            spec["volumeClaimTemplates"] = claims
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": self.meta(name, component, **extra),
            "spec": spec,
        }

    def node_set(self, ns: NodeSet, config_hash: str) -> dict[str, Any]:
        volumes, mounts = self.config_volumes()
        volumes.append(self.jail_volume())
        mounts.append({"name": "jail", "mountPath": slurmconf.JAIL_ROOT})
        env = [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            MUNGE_ENV,
            *({"name": k, "value": v} for k, v in sorted(ns.env.items())),
        ]
        resources = {
            "cpu": str(ns.cpus),
            "memory": f"{ns.memory_mb}Mi",
            **({"nvidia.com/gpu": str(ns.gpus)} if ns.gpus else {}),
        }
        if ns.gpus:
            root = self.spec.gpu.driver_root.rstrip("/")
            for i, sub in enumerate(DRIVER_DIRS):
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
        container = {
            "name": "slurmd",
            "image": self.images.refs[ns.image],
            "args": ["slurmd", "-D", "-N", "$(POD_NAME)"],
            "env": env,
            "ports": [{"name": "slurmd", "containerPort": SLURMD_PORT, "protocol": "TCP"}],
            "volumeMounts": mounts,
            # slurmd is up (a TCP probe would fill its log with empty-connection errors)
            "readinessProbe": pid_probe("/var/run/slurmd.pid"),
            "securityContext": self.security(
                (*CAPABILITIES["node"], *ns.capabilities), runs_users=True, runs_containers=True
            ),
            "resources": {"requests": self.node_requests(resources), "limits": dict(resources)},
            # a pod being deleted drains its node and lets its jobs finish within the grace
            # period; those still running then end as on a lost node (images/slurmd/node-state)
            "lifecycle": {"preStop": {"exec": {"command": [NODE_STATE, "stopping"]}}},
        }
        extra: dict[str, Any] = {}
        if ns.affinity.matchExpressions:
            terms = [
                {
                    "key": e.key,
                    "operator": e.operator,
                    **({"values": list(e.values)} if e.values else {}),
                }
                for e in ns.affinity.matchExpressions
            ]
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
        pod = self.pod_spec([container], volumes, **extra)
        # preStop waits for the jobs up to this, less a margin for slurmd's own stop
        grace = self.k8s.node_grace_seconds
        env.append({"name": "NODE_STATE_GRACE", "value": str(max(grace - STOP_MARGIN, 0))})
        pod["terminationGracePeriodSeconds"] = grace
        return self.stateful_set(
            ns.name,
            "node",
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

    def login_service(self) -> dict[str, Any]:
        port: dict[str, Any] = {"name": "ssh", "port": 22, "targetPort": 22, "protocol": "TCP"}
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(LOGIN, LOGIN),
            "spec": {
                "type": self.k8s.login_service,
                "selector": self.selector(LOGIN),
                "ports": [port],
            },
        }

    def login(self, config_hash: str) -> dict[str, Any]:
        volumes, mounts = self.config_volumes()
        container = {
            "name": LOGIN,
            "image": self.images.refs[LOGIN],
            "args": ["/usr/sbin/sshd", "-D", "-e"],
            "env": [
                MUNGE_ENV,
                *(
                    [{"name": jail_contract.SCRATCH_ENV, "value": " ".join(scratch)}]
                    if (scratch := self.spec.jail.scratch)
                    else []
                ),
            ],
            "ports": [{"name": "ssh", "containerPort": 22, "protocol": "TCP"}],
            "volumeMounts": [*mounts, {"name": "jail", "mountPath": slurmconf.JAIL_ROOT}],
            "readinessProbe": pid_probe("/run/sshd.pid"),
            "securityContext": self.security(CAPABILITIES[LOGIN], runs_users=True),
            "resources": {
                "requests": {"cpu": "250m", "memory": "256Mi"},
                "limits": {"cpu": "2", "memory": "2Gi"},
            },
        }
        pod = self.pod_spec([container], [*volumes, self.jail_volume()])
        return self.stateful_set(LOGIN, LOGIN, 1, pod, config_hash, service=f"{LOGIN}")

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
                "template": {
                    "metadata": {
                        "labels": self.labels(name),
                        "annotations": self.pod_annotations(pod["containers"], config_hash),
                    },
                    "spec": pod,
                },
            },
        }

    def database(self) -> dict[str, Any]:
        """The cluster's own MariaDB: its first start on an empty claim makes Slurm's database
        and user from the password Secret (images/mariadb/mariadb-init)."""
        volume, mount = self.secret_volume(DB_PASSWORD)
        container = {
            "name": DATABASE,
            "image": self.images.refs[DATABASE],
            "env": [DB_PASSWORD.env_var],
            "ports": [{"name": "mysql", "containerPort": DATABASE_PORT, "protocol": "TCP"}],
            "volumeMounts": [mount, {"name": "data", "mountPath": DATABASE_DIR}],
            # through the socket: a TCP probe would log an aborted connection each time
            "readinessProbe": {
                "exec": {"command": ["mariadb-admin", "ping"]},
                "periodSeconds": PROBE_PERIOD,
            },
            "securityContext": self.security(CAPABILITIES[DATABASE]),
            "resources": {
                "requests": {"cpu": "250m", "memory": "512Mi"},
                # the buffer pool (images/mariadb/slurmforge.cnf) grows to 2 GiB
                "limits": {"cpu": "2", "memory": "3Gi"},
            },
        }
        pod = self.pod_spec([container], [volume], wait=False)
        pod["terminationGracePeriodSeconds"] = 60  # InnoDB shuts down cleanly
        metadata = {"name": "data", "labels": self.labels(DATABASE)}
        claim = self.claim(metadata, "ReadWriteOnce", self.k8s.database)
        return self.stateful_set(DATABASE, DATABASE, 1, pod, "", [claim])

    def slurmdbd(self, config_hash: str) -> dict[str, Any]:
        """slurmdbd under the host name its DbdHost names; it waits for the database's port."""
        db = self.spec.accounting.database
        host, port = (db.host, db.port) if db else (DATABASE, DATABASE_PORT)
        volumes, mounts = self.config_volumes(jail_conf=False, slurm_conf=False)
        for secret in (JWT, DB_PASSWORD):
            volume, mount = self.secret_volume(secret)
            volumes.append(volume)
            mounts.append(mount)
        volumes += [
            {"name": "slurmdbd-config", "configMap": {"name": DBD_CONFIG}},
            self.jail_volume(),
        ]
        mounts += [
            {"name": "slurmdbd-config", "mountPath": DBD_CONF_DIR, "readOnly": True},
            # user names resolve as on the nodes (the jail's accounts)
            {"name": "jail", "mountPath": slurmconf.JAIL_ROOT, "readOnly": True},
        ]
        container = {
            "name": DBD,
            "image": self.images.refs[DBD],
            "args": ["slurmdbd", "-D"],
            "env": [
                MUNGE_ENV,
                JWT.env_var,
                DB_PASSWORD.env_var,
                {"name": "SLURMDBD_CONF_IN", "value": f"{DBD_CONF_DIR}/slurmdbd.conf"},
            ],
            "ports": [{"name": "slurmdbd", "containerPort": DBD_PORT, "protocol": "TCP"}],
            "volumeMounts": mounts,
            "readinessProbe": pid_probe("/run/slurmdbd/slurmdbd.pid"),
            "securityContext": self.security(CAPABILITIES[DBD]),
            "resources": {
                "requests": {"cpu": "100m", "memory": "256Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            },
        }
        wait = {
            "name": "wait-for-database",
            "image": self.images.refs[DBD],
            "command": [
                "/bin/bash",
                "-c",
                f"until (exec 3<>/dev/tcp/{host}/{port}) 2>/dev/null; do "
                f"echo 'waiting for the database at {host}:{port}'; sleep 2; done",
            ],
            "securityContext": self.security(()),
            "resources": small_resources(),
        }
        pod = self.pod_spec([container], volumes, hostname=DBD)  # DbdHost=slurmdbd
        pod["initContainers"].append(wait)
        return self.deployment(DBD, pod, config_hash)

    def rest_service(self) -> dict[str, Any]:
        """slurmrestd where users reach it: a Service of the login's type, on ``rest.port``."""
        port = self.spec.rest.port
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(RESTD, RESTD),
            "spec": {
                "type": self.k8s.login_service,
                "selector": self.selector(RESTD),
                "ports": [
                    {"name": "http", "port": port, "targetPort": RESTD_PORT, "protocol": "TCP"}
                ],
            },
        }

    def slurmrestd(self, config_hash: str) -> dict[str, Any]:
        """slurmrestd with the nodes' slurm.conf; it holds no key (each request's token is
        checked by slurmctld and slurmdbd)."""
        volumes, mounts = self.config_volumes(jail_conf=False)
        volumes.append(self.jail_volume())
        mounts.append({"name": "jail", "mountPath": slurmconf.JAIL_ROOT, "readOnly": True})
        container = {
            "name": RESTD,
            "image": self.images.refs[RESTD],
            "env": [MUNGE_ENV],
            "ports": [{"name": "http", "containerPort": RESTD_PORT, "protocol": "TCP"}],
            "volumeMounts": mounts,
            # listening (a TCP or HTTP probe would be an unauthenticated request, logged)
            "readinessProbe": listening_probe(RESTD_PORT),
            "securityContext": self.security(CAPABILITIES[RESTD]),
            "resources": {
                "requests": {"cpu": "100m", "memory": "128Mi"},
                "limits": {"cpu": "1", "memory": "512Mi"},
            },
        }
        pod = self.pod_spec([container], volumes)
        return self.deployment(RESTD, pod, config_hash)

    def health_check(self, config_hash: str) -> dict[str, Any]:
        """The jail's gpu-check as a job step on every GPU node in service, as `invoke gpu-check`
        runs it: srun inside the jail, from a pod set up like the login node. A node below the
        threshold drains itself; nodes it drained are resumed by `invoke gpu-check`, which
        reserves them first."""
        steps = []
        for ns in self.gpu_node_sets:
            part = next(p.name for p in self.spec.partitions if ns.name in p.nodesets)
            steps.append(
                f"srun -p {part} -N {ns.replicas} --ntasks-per-node=1 --exclusive "
                f"--gres=gpu:{ns.gpus} -t 30 "
                f"/opt/slurmforge/gpu-check --min-busbw {self.spec.gpu.min_busbw:g}"
            )
        volumes, mounts = self.config_volumes()
        container = {
            "name": HEALTH_CHECK,
            "image": self.images.refs[LOGIN],
            # the image's entrypoint starts munged and makes the jail's runtime mounts first
            "args": ["chroot", slurmconf.JAIL_ROOT, "/bin/bash", "-c", "\n".join(steps)],
            "env": [MUNGE_ENV],
            "volumeMounts": [*mounts, {"name": "jail", "mountPath": slurmconf.JAIL_ROOT}],
            "securityContext": self.security(CAPABILITIES[HEALTH_CHECK]),
            "resources": {
                "requests": {"cpu": "100m", "memory": "128Mi"},
                "limits": {"cpu": "1", "memory": "512Mi"},
            },
        }
        pod = self.pod_spec([container], [*volumes, self.jail_volume()], restartPolicy="Never")
        template = {
            "metadata": {
                "labels": self.labels(HEALTH_CHECK),
                "annotations": self.pod_annotations([container], config_hash),
            },
            "spec": pod,
        }
        return {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": self.meta(HEALTH_CHECK, HEALTH_CHECK),
            "spec": {
                "schedule": self.k8s.health_check.schedule,
                "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 3,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": {"spec": {"backoffLimit": 0, "template": template}},
            },
        }


def files_digest(files: dict[str, str]) -> str:
    return hashlib.sha256(
        "".join(f"{k}\0{v}\0" for k, v in sorted(files.items())).encode()
    ).hexdigest()[:16]


def one_per_set(cluster: Cluster) -> Cluster:
    """``cluster`` with every node set at one node: its shape without its size."""
    nodesets = tuple(ns.model_copy(update={"replicas": 1}) for ns in cluster.spec.nodesets)
    return dataclasses.replace(cluster, spec=cluster.spec.model_copy(update={"nodesets": nodesets}))


def pid_probe(pid_file: str) -> dict[str, Any]:
    """Ready while the daemon whose pid file this is runs."""
    command = ["sh", "-c", f"kill -0 $(cat {pid_file})"]
    return {"exec": {"command": command}, "periodSeconds": PROBE_PERIOD}


def listening_probe(port: int) -> dict[str, Any]:
    """Ready while something in the pod listens on ``port`` (the kernel's socket table: no
    connection is made)."""
    pattern = f":{port:04X} 0+:0000 0A "
    return {
        "exec": {"command": ["grep", "-qE", pattern, "/proc/net/tcp", "/proc/net/tcp6"]},
        "periodSeconds": PROBE_PERIOD,
    }


def small_resources() -> dict[str, Any]:
    return {
        "requests": {"cpu": "10m", "memory": "16Mi"},
        "limits": {"cpu": "100m", "memory": "64Mi"},
    }


def kustomization(files: list[str], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
        "resources": files,
    }


def dump(obj: dict[str, Any], source: str) -> str:
    return generated.dump_yaml(obj, source)


def write(out: Path, objects: dict[str, dict[str, Any]], namespace: str, source: str) -> Path:
    """Replace ``out`` with the objects' files and their kustomization; returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    names = [*objects, "kustomization.yaml"]
    for stale in out.iterdir():
        # only files an earlier render wrote (they start with its header)
        if stale.is_file() and stale.name not in names and generated.is_ours(stale):
            stale.unlink()
    for name, obj in objects.items():
        (out / name).write_text(dump(obj, source))
    (out / "kustomization.yaml").write_text(dump(kustomization(list(objects), namespace), source))
    return out
