"""The `k8s` target's runner (k8s_render.py renders for it): render the kustomize directory,
validate it, and apply it with kubectl.

`invoke deploy --target k8s --dry-run` stops after writing and validating: every object against
the strict OpenAPI schemas of each Kubernetes version in ``kubernetes.versions``
(kubernetes-validate) and the directory through ``kubectl kustomize`` (client-side). Otherwise:
the accounting database is checked (an external one logged in to; the cluster's own still has
the password Secret it was made with); nodes a smaller node set leaves out are drained;
server-side apply of the Namespace, then the missing Secrets (k8s_secrets.py; each made once,
in a private temporary file removed right after, or from an external database's password file),
then the rest, leaving out (and naming) kinds the server does not serve; ``kubectl wait`` for the
populate Job; a rollout status per StatefulSet and Deployment; running pods brought to the
applied config (a changed node list does not roll pods, see k8s_render.ManifestRenderer.render)
and ``scontrol reconfigure``; a wait, through ``kubectl exec`` in slurmctld, until every node is
in service; and with accounting, until slurmdbd knows the cluster (then the default account).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, ClassVar

import yaml

from slurmforge import jail_contract, state
from slurmforge.deploy import check_namespace, load_cluster, roles
from slurmforge.deploy.identity import probe
from slurmforge.deploy.identity import sssd as identity
from slurmforge.deploy.k8s import images as k8s_images
from slurmforge.deploy.k8s import kubectl, kustomize
from slurmforge.deploy.k8s import render as k8s_render
from slurmforge.deploy.k8s.kubectl import Runner, checked, kubectl_path
from slurmforge.deploy.k8s.secrets import Secrets
from slurmforge.deploy.roles import CONTROLLER, DBD, JAIL, LOGIN, NODE
from slurmforge.deploy.slurm import ctl as slurmctl
from slurmforge.deploy.slurm import database as accounting_db
from slurmforge.deploy.slurm import siteconf, upgrade
from slurmforge.deploy.spec.model import Cluster, check_user
from slurmforge.deploy.target import Target, Where
from slurmforge.errors import ConfigError, DeployError

CONFIG_ANNOTATION = "slurmforge.io/config"  # on a pod: the Slurm config it was told to load


def known_versions() -> list[str]:
    """Kubernetes minor versions kubernetes-validate has strict schemas for."""
    from kubernetes_validate import utils

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    return sorted({".".join(v.split(".")[:2]) for v in utils.all_versions()}, key=key)


# API groups of operators a site may run, whose objects are applied only where served
CUSTOM_RESOURCES = ("monitoring.coreos.com/v1",)


class Kube(Target):
    """The `k8s` target: a kustomize directory applied with kubectl."""

    NAME = "k8s"
    DEFAULT_WAIT: ClassVar[float] = 600.0  # per wait
    OPTIONS = frozenset({"context", "namespace", "dry_run"})

    @classmethod
    def open(cls, where: Where) -> Kube:
        """Images are found in the push lock, else in the local engine (when one answers)."""
        from slurmforge.engine import Engine
        from slurmforge.errors import EngineUnavailable

        check_namespace(where.namespace)
        cluster, root = load_cluster(where)
        kube = cls(cluster, where.out_root, root, None, where.namespace, where.context)
        kube.dry_run = where.dry_run
        kube.check_versions()
        with contextlib.suppress(EngineUnavailable):  # fine when the push lock pins every image
            kube.engine = Engine.connect()
        return kube

    def __init__(
        self,
        cluster: Cluster,
        out_root: Path,
        root: Path,
        engine: Any | None = None,
        namespace: str | None = None,
        context: str | None = None,
        run: Runner = kubectl.run,
        log: IO[str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.dir = out_root / "k8s" / cluster.name
        self.root = root  # where build/images.lock.json is
        self.engine = engine
        self.namespace = namespace or cluster.spec.kubernetes.namespace or cluster.name
        self.log = log or sys.stderr
        self.k = kubectl.Kubectl(cluster.name, self.namespace, context, run)
        self.secrets = Secrets(cluster, self.k, self.log)
        self.objects: dict[str, dict[str, Any]] = {}
        self.dry_run = False
        self.backup_first = False  # back up before a series change (deploy without --no-backup)

    def deploy(self, timeout: float, back_up: bool = True) -> list[str]:
        """Render and validate; unless a dry run, apply and wait (see the module's docstring).
        ``back_up``: take a backup before a Slurm series change."""
        self.backup_first = back_up
        # a certificate or bind the site's directory refuses stops it before anything is written
        notes = [] if self.dry_run else probe.probe(self.cluster.path, self.cluster.spec)
        directory = self.write_kustomization()
        versions = self.validate()
        lines = [
            *(f"note: {n}" for n in notes),
            f"wrote {len(self.objects)} objects to {directory} "
            f"(valid for Kubernetes {', '.join(versions)}; `kubectl kustomize` renders it)",
        ]
        return lines if self.dry_run else [*lines, self.apply(timeout)]

    # -- render and validate -----------------------------------------------------------------

    def write_kustomization(self) -> Path:
        """Render the cluster's objects and write them, with their kustomization, to
        ``self.dir``; returns it."""
        if identity.embedded(self.cluster.spec):
            raise ConfigError(
                f"{self.cluster.path}: identity.ldap.embedded: the k8s target runs no directory "
                "of its own; name the site's directory in identity.ldap.uri (with bind_dn, "
                "bind_password_file and ca_file)"
            )
        siteconf.check_cluster(self.cluster, self.engine)
        local_ids: dict[str, str] = {}
        pyxis = False
        if self.engine is not None:
            for component, ref in self.cluster.images.items():
                info = self.engine.inspect(ref)
                if info is not None:
                    local_ids[component] = info.id
                    pyxis = pyxis or (component == JAIL and info.carries("pyxis"))

        images = k8s_images.resolve(self.cluster, state.read_images_lock(self.root), local_ids)
        renderer = k8s_render.ManifestRenderer(self.cluster, images, self.namespace)
        self.objects = renderer.render(pyxis)
        self.populate_job = next(
            o["metadata"]["name"] for o in self.objects.values() if o["kind"] == "Job"
        )
        return kustomize.write(self.dir, self.objects, self.namespace, str(self.cluster.path))

    def check_versions(self) -> tuple[str, ...]:
        """``kubernetes.versions``, each one kubernetes-validate has schemas for."""
        versions = self.cluster.spec.kubernetes.versions
        known = known_versions()
        for i, version in enumerate(versions):
            if version not in known:
                raise ConfigError(
                    f"{self.cluster.path}: kubernetes.versions[{i}]: no schemas for Kubernetes "
                    f"{version}; expected one of {', '.join(known)}"
                )
        return versions

    def validate(self) -> list[str]:
        """Each object against each configured version (strict), then `kubectl kustomize`."""
        import kubernetes_validate

        versions = self.check_versions()
        for name in self.objects:
            obj = yaml.safe_load((self.dir / name).read_text())  # what kubectl will send
            if obj["apiVersion"] in CUSTOM_RESOURCES:  # no schema: a CRD's, checked on apply
                continue
            for version in versions:
                try:
                    kubernetes_validate.validate(obj, f"{version}.0", strict=True)
                except kubernetes_validate.ValidationError as exc:
                    where = ".".join(str(p) for p in exc.path)
                    raise DeployError(
                        f"{self.dir / name}: invalid for Kubernetes {version} at {where}: "
                        f"{exc.message}"
                    ) from None
        proc = self.k.run([kubectl_path(), "kustomize", str(self.dir)])
        if proc.returncode:
            raise DeployError(f"kubectl kustomize {self.dir} failed: {proc.stderr.strip()}")
        return list(versions)

    # -- apply -------------------------------------------------------------------------------

    def unsupported(self) -> dict[str, str]:
        """File → why the server cannot take it (a kind its version does not serve, such as
        batch/v1 CronJob before Kubernetes 1.21)."""
        served: dict[str, set[str]] = {}
        out = {}
        for name, obj in self.objects.items():
            version, kind = obj["apiVersion"], obj["kind"]
            if version not in served:
                served[version] = self.k.served_kinds(version)
            if kind not in served[version]:
                out[name] = f"this server does not serve {version} {kind}"
        return out

    def apply_files(self, names: list[str]) -> None:
        """Server-side apply of these files, in this order; on failure, every line kubectl
        wrote, and which objects were applied and which were not."""
        argv = ["apply", "--server-side", "--field-manager=slurmforge"]
        for name in names:
            argv += ["-f", str(self.dir / name)]
        proc = self.k.run(self.k.argv(*argv, namespaced=False))
        if proc.returncode == 0:
            return
        done = {ln.split()[0] for ln in proc.stdout.splitlines() if ln.strip()}
        applied, missing = [], []
        for name in names:
            obj = self.objects[name]
            ref = f"{obj['kind'].lower()}/{obj['metadata']['name']}"
            (applied if any(d.endswith(ref) for d in done) else missing).append(ref)
        lines = (proc.stderr or "").strip().splitlines()
        raise DeployError(
            f"kubectl apply failed (exit {proc.returncode}):"
            + "".join(f"\n  {ln}" for ln in lines)
            + f"\n  applied: {', '.join(applied) or 'nothing'}"
            + f"\n  not applied: {', '.join(missing) or 'nothing'}"
        )

    def apply(self, timeout: float, removed: list[str] | None = None) -> str:
        """Check the accounting database; drain the nodes a smaller node set leaves out; apply
        (the Namespace, then the missing Secrets, then the rest, so that nothing waits for what
        it mounts); wait for populate and the rollouts; hand running pods a changed node list;
        wait for every node, then for slurmdbd to know the cluster. `sinfo -N -l`."""
        skipped = self.unsupported()
        names = [n for n in self.objects if n not in skipped]
        self.check_upgrade()
        self.secrets.check_database()  # before anything changes (a drain included)
        removed = self.removed_nodes() if removed is None else removed
        seen = slurmctl.nodes(self.controller_sh)  # None before the first deploy
        kept = slurmctl.drains(seen)  # an operator's drains outlive the apply
        known = [n for n in removed if seen and n in seen]
        if known:
            slurmctl.drain(self.controller_sh, known, timeout)
        first = [n for n in names if self.objects[n]["kind"] == "Namespace"]
        self.apply_files(first)
        rotated = self.secrets.ensure()
        self.apply_files([n for n in names if n not in first])
        if rotated and self.k.running_pods(DBD):  # its config takes the password at start
            self.k.check(
                self.k.argv("rollout", "restart", f"deployment/{DBD}"),
                "restarting slurmdbd for the new database password",
            )
        for name, why in skipped.items():
            print(f"not applied: {self.dir / name} ({why})", file=self.log)
        wait = f"--timeout={int(timeout)}s"
        self.k.check(
            self.k.argv("wait", "--for=condition=complete", f"job/{self.populate_job}", wait),
            f"waiting for job/{self.populate_job}",
        )
        for kind, name in self.rollouts():
            self.k.check(
                self.k.argv("rollout", "status", f"{kind}/{name}", wait),
                f"rollout of {kind}/{name}",
            )
        if self.sync_config(timeout):
            slurmctl.reconfigure(self.controller_sh)
        nodes = [node for _, node in self.cluster.nodes]
        seen = slurmctl.wait_ready(self.controller_sh, nodes, kept, timeout)
        if not slurmctl.ready(seen, nodes, kept):
            shown = ", ".join(slurmctl.unready(seen, nodes, kept))
            raise DeployError(f"not every node is in service after {timeout:.0f} s: {shown}")
        for line in slurmctl.kept_drained(seen or {}, nodes, kept):
            print(f"note: {line}", file=self.log)
        if self.cluster.spec.accounting.enabled:
            for line in accounting_db.setup(self.cluster, self.controller_sh, timeout):
                print(f"note: {line}", file=self.log)
        return self.k.check(
            self.k.argv("exec", f"{CONTROLLER}-0", "-c", CONTROLLER, "--", "sinfo", "-N", "-l"),
            "sinfo in slurmctld",
        )

    def rollouts(self) -> list[tuple[str, str]]:
        """(kind, name) of what runs pods, in the order their rollouts are waited for."""
        # a node set scaled to zero has no rollout to wait for
        empty = {ns.name for ns in self.cluster.spec.nodesets if not ns.replicas}
        return [
            (o["kind"].lower(), o["metadata"]["name"])
            for o in self.objects.values()
            if o["kind"] in ("StatefulSet", "Deployment") and o["metadata"]["name"] not in empty
        ]

    def scale(self, new: Cluster, timeout: float) -> list[str]:
        """Apply ``new`` (this cluster with other node counts); returns the removed nodes."""
        self.cluster = self.secrets.cluster = new
        self.write_kustomization()
        self.validate()
        removed = self.removed_nodes()
        self.apply(timeout, removed)
        return removed

    def check_deployed(self) -> None:
        argv = self.k.argv("get", "statefulset", CONTROLLER, "-o", "name")
        proc = self.k.run(argv)
        if proc.returncode and "NotFound" in proc.stderr:
            raise ConfigError(
                f"cluster {self.cluster.name} is not deployed in namespace {self.namespace}",
                hint="run: invoke deploy --target k8s",
            )
        checked(proc, "looking for slurmctld")

    def admit(self, new: Cluster) -> None:
        """Nothing to check before a scale: the scheduler places GPU pods, or leaves them
        Pending (and the wait for nodes names them)."""

    # -- operate -----------------------------------------------------------------------------

    def check_upgrade(self) -> None:
        """Refuse a Slurm release the running slurmctld cannot move to (upgrade.check). The
        rollouts then replace the daemons together: Slurm's own order (slurmdbd first) is kept
        by the local target only."""
        code, out = self.controller_sh("scontrol version")
        running = out.split()[-1] if code == 0 and out.startswith("slurm ") else None
        if running and upgrade.check_cluster(self.cluster, running) and self.backup_first:
            from slurmforge.deploy.backup import take as backup

            backup.before_upgrade(self)

    def sh(self, role: str, command: str) -> tuple[int, str]:
        """``command`` in the role's first pod (``<role>-0`` of its StatefulSet)."""
        container = roles.role(role).container_name
        proc = self.k.exec(f"{role}-0", container, "bash", "-c", command)
        out = proc.stdout if proc.returncode == 0 else proc.stderr + proc.stdout
        return proc.returncode, out.strip()

    def controller_sh(self, command: str) -> tuple[int, str]:
        return self.sh(CONTROLLER, command)

    def objects_of(self, kind: str, name: str) -> dict[str, Any]:
        """The rendered object of that kind and name."""
        return next(
            o for o in self.objects.values() if o["kind"] == kind and o["metadata"]["name"] == name
        )

    def backup(self, out: Path | None, scheduled: bool = False) -> list[str]:
        from slurmforge.deploy.backup import take as backup
        from slurmforge.deploy.k8s import scheduled as k8s_scheduled

        if not scheduled:
            return backup.backup(self, out)[1]
        return k8s_scheduled.fetch(self, out or backup.default_dir(self.cluster.name))

    def restore(self, archive: Path, force: bool, timeout: float) -> list[str]:
        from slurmforge.deploy.k8s import restore as k8s_restore

        return k8s_restore.restore(self, archive, force, timeout)

    def exec_argv(self, role: str, command: str) -> list[str]:
        container = roles.role(role).container_name
        return self.k.argv("exec", "-i", f"{role}-0", "-c", container, "--", "bash", "-c", command)

    def secret(self, secret: roles.Secret) -> bytes | None:
        return self.secrets.data(secret)

    def status(self) -> str:
        """The cluster's pods, then what Slurm says about its nodes and jobs."""
        pods = self.k.check(
            self.k.argv("get", "pods", "-l", f"app.kubernetes.io/instance={self.cluster.name}"),
            "listing the pods",
        )
        code, out = self.controller_sh("sinfo -N -l; echo; squeue")
        return pods.rstrip() + "\n\n" + (out if code == 0 else f"slurmctld is not answering: {out}")

    def login_argv(self, user: str | None) -> list[str]:
        """kubectl exec into login-0, chrooted into the jail (as ``user`` through su)."""
        inner = ["su", "--login", "--", check_user(user)] if user else ["/bin/bash", "-l"]
        tty = ["-it"] if sys.stdin.isatty() else ["-i"]
        container = roles.role(LOGIN).container_name
        exec_ = ["exec", *tty, f"{LOGIN}-0", "-c", container, "--"]
        return self.k.argv(*exec_, "chroot", jail_contract.ROOT, *inner)

    def gpu_check(self, min_busbw: float | None, command: str | None) -> list:
        raise self._unsupported(
            "gpu-check",
            hint="the CronJob gpu-health-check runs it on schedule; now: kubectl create job "
            f"--namespace {self.namespace} --from=cronjob/gpu-health-check gpu-check-now",
        )

    def down(self, volumes: bool) -> None:
        raise self._unsupported(
            "down",
            hint=f"kubectl delete -k {self.dir} removes what deploy applied (claims made from "
            "volumeClaimTemplates stay: the controller state and the database)",
        )

    def removed_nodes(self) -> list[str]:
        """Nodes the server runs that the cluster, as rendered now, leaves out (highest
        ordinals: a StatefulSet scales down from the top)."""
        counts = {ns.name: ns.replicas for ns in self.cluster.spec.nodesets}
        removed = []
        for item in self.k.get("statefulsets", **{"app.kubernetes.io/component": NODE}):
            name, now = item["metadata"]["name"], item["spec"].get("replicas", 1)
            if name in counts:
                removed += [f"{name}-{i}" for i in range(counts[name], now)]
        return removed

    def expected_config(self) -> dict[str, dict[str, str]]:
        """Mount directory → file → sha256 of what the ConfigMaps hold now."""
        data = {
            o["metadata"]["name"]: o["data"]
            for o in self.objects.values()
            if o["kind"] == "ConfigMap"
        }
        return {
            config.path: {
                f: hashlib.sha256(v.encode()).hexdigest() for f, v in data[config.name].items()
            }
            for config in (roles.SLURM_CONF, roles.JAIL_CONF)
        }

    def sync_config(self, timeout: float) -> bool:
        """Bring the config every running Slurm pod sees up to the applied ConfigMaps; True when
        any pod saw an older one (slurmctld and slurmd must then re-read theirs).

        A pod sees a ConfigMap change once its kubelet re-syncs it, which by default takes up to
        a minute or two; an update of the pod's own object (an annotation naming the config)
        makes the kubelet sync it at once."""
        want = self.expected_config()
        mounting = {  # role → the watched config directories its pods mount
            role.name: [c.path for c in role.configs if c.path in want]
            for role in roles.running(self.cluster.spec, "k8s")
            if role.workload in ("daemon", "nodes")
        }
        pods = {}
        for item in self.k.get("pods"):
            component = item["metadata"]["labels"].get("app.kubernetes.io/component")
            if not mounting.get(component):
                continue
            if item["status"].get("phase") != "Running" or item["metadata"].get(
                "deletionTimestamp"
            ):
                continue
            expect = {f"{d}/{f}": h for d in mounting[component] for f, h in want[d].items()}
            pods[item["metadata"]["name"]] = (item["spec"]["containers"][0]["name"], expect)

        def stale(pod: str) -> bool:
            container, expect = pods[pod]
            argv = ["sha256sum", *sorted(expect)]
            proc = self.k.exec(pod, container, *argv)
            seen = {
                path: digest
                for digest, path in (ln.split(None, 1) for ln in proc.stdout.splitlines() if ln)
            }
            return seen != expect

        with ThreadPoolExecutor(max_workers=8) as pool:
            older = [p for p, old in zip(pods, pool.map(stale, pods), strict=True) if old]
            if not older:
                return False
            digest = hashlib.sha256(json.dumps(want, sort_keys=True).encode()).hexdigest()[:16]
            self.k.check(
                self.k.argv(
                    "annotate", "pod", *older, f"{CONFIG_ANNOTATION}={digest}", "--overwrite"
                ),
                "asking the kubelets to re-sync the Slurm config",
            )
            deadline = time.monotonic() + timeout
            waiting = older
            while waiting and time.monotonic() < deadline:
                time.sleep(1)
                waiting = [
                    p for p, old in zip(waiting, pool.map(stale, waiting), strict=True) if old
                ]
        if waiting:
            raise DeployError(
                f"after {timeout:.0f} s, these pods still see an older Slurm config: "
                + ", ".join(waiting)
            )
        print(f"updated the Slurm config of {', '.join(older)}", file=self.log)
        return True
