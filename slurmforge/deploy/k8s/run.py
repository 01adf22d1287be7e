"""The `k8s` target's face: what each command does with the cluster in a namespace. Its parts:
manifests.py (rendered by render.py, written and validated), apply.py (applied with kubectl,
waited for), config_sync.py (running pods brought to the applied config), secrets.py,
restore.py and scheduled.py.

`invoke deploy --target k8s --dry-run` stops after writing and validating the manifests.
"""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path
from typing import IO, Any, ClassVar

from slurmforge import jail_contract
from slurmforge.deploy import load_cluster, roles
from slurmforge.deploy.backup import take
from slurmforge.deploy.identity import probe
from slurmforge.deploy.k8s import apply, controllers, kubectl
from slurmforge.deploy.k8s.kubectl import Runner, checked
from slurmforge.deploy.k8s.manifests import Manifests
from slurmforge.deploy.k8s.secrets import Secrets
from slurmforge.deploy.roles import CONTROLLER, LOGIN
from slurmforge.deploy.spec.model import Cluster, check_user
from slurmforge.deploy.target import Target, Where
from slurmforge.errors import ConfigError


def _check_namespace(namespace: str | None) -> None:
    if namespace is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise ConfigError(f"--namespace {namespace!r}: expected a DNS label (a-z, 0-9, -)")


def _check_own_namespace(namespace: str, given: str | None, cluster: Cluster) -> None:
    """The cluster's ``namespace`` (``given`` by --namespace, else from the cluster file) is its
    own: deploy writes a Namespace object with the cluster's labels and pod-security level, and
    `kubectl delete -k` of the directory removes it. Never one of Kubernetes' own (default,
    kube-system and any kube-*)."""
    if namespace == "default" or namespace.startswith("kube-"):
        where = (
            "--namespace" if given
            else f"{cluster.path}: kubernetes.namespace" if cluster.spec.kubernetes.namespace
            else f"{cluster.path}: name (the namespace unless kubernetes.namespace is set)"
        )  # fmt: skip
        named = f"{where} {namespace!r}"
        raise ConfigError(f"{named}: one of Kubernetes' own namespaces; give the cluster its own")


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

        _check_namespace(where.namespace)
        cluster, root = load_cluster(where)
        kube = cls(cluster, where.out_root, root, None, where.namespace, where.context)
        kube.dry_run = where.dry_run
        kube.manifests.check_versions()
        with contextlib.suppress(EngineUnavailable):  # fine when the push lock pins every image
            kube.manifests.engine = Engine.connect()
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
        self.namespace = namespace or cluster.spec.kubernetes.namespace or cluster.name
        _check_own_namespace(self.namespace, namespace, cluster)
        self.log = log or sys.stderr
        self.k = kubectl.Kubectl(cluster.name, self.namespace, context, run)
        self.secrets = Secrets(cluster, self.k, self.log)
        self.manifests = Manifests(cluster, self.dir, self.namespace, root, self.k, engine)
        self.dry_run = False
        self.backup_first = False  # back up before a series change (deploy without --no-backup)

    def deploy(self, timeout: float, back_up: bool = True) -> list[str]:
        """Render and validate; unless a dry run, apply and wait (apply.py).
        ``back_up``: take a backup before a Slurm series change."""
        self.backup_first = back_up
        # a certificate or bind the site's directory refuses stops it before anything is written
        notes = [] if self.dry_run else probe.probe(self.cluster.path, self.cluster.spec)
        directory = self.manifests.write()
        versions = self.manifests.validate()
        lines = [
            *(f"note: {n}" for n in notes),
            f"wrote {len(self.manifests.objects)} objects to {directory} "
            f"(valid for Kubernetes {', '.join(versions)}; `kubectl kustomize` renders it)",
        ]
        return lines if self.dry_run else [*lines, apply.apply(self, timeout)]

    def scale(self, new: Cluster, timeout: float) -> list[str]:
        """Apply ``new`` (this cluster with other node counts); returns the removed nodes."""
        self.cluster = self.secrets.cluster = self.manifests.cluster = new
        self.manifests.write()
        self.manifests.validate()
        removed = apply.removed_nodes(self)
        apply.apply(self, timeout, removed)
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

    def pod(self, role: str) -> str:
        """The pod a role's commands run in: ``<role>-0`` of its StatefulSet, or the controller
        that is up where there are two."""
        if role == CONTROLLER:
            return controllers.answering(self.k, self.cluster.spec)
        return f"{role}-0"

    def sh(self, role: str, command: str) -> tuple[int, str]:
        """``command`` in the role's pod (``pod``)."""
        container = roles.role(role).container_name
        proc = self.k.exec(self.pod(role), container, "bash", "-c", command)
        out = proc.stdout if proc.returncode == 0 else proc.stderr + proc.stdout
        return proc.returncode, out.strip()

    def controller_sh(self, command: str) -> tuple[int, str]:
        return self.sh(CONTROLLER, command)

    def backup(self, out: Path | None, scheduled: bool = False) -> list[str]:
        from slurmforge.deploy.k8s import scheduled as k8s_scheduled

        if not scheduled:
            return take.backup(self, out)[1]
        directory = out or take.default_dir(self.cluster.name)
        return k8s_scheduled.fetch(self.cluster, self.k, self.manifests, directory)

    def restore(self, archive: Path, force: bool, timeout: float) -> list[str]:
        from slurmforge.deploy.k8s import restore as k8s_restore

        return k8s_restore.restore(self, archive, force, timeout)

    def exec_argv(self, role: str, command: str) -> list[str]:
        container = roles.role(role).container_name
        pod = self.pod(role)
        return self.k.argv("exec", "-i", pod, "-c", container, "--", "bash", "-c", command)

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
