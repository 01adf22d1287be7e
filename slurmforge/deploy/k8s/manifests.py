"""The k8s target's manifests: the cluster's objects rendered (render.py) and written as a
kustomize directory, then validated: every object against the strict OpenAPI schemas of each
Kubernetes version in ``kubernetes.versions`` (kubernetes-validate) and the directory through
``kubectl kustomize`` (client-side)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from slurmforge import state
from slurmforge.deploy.identity import sssd
from slurmforge.deploy.k8s import images as k8s_images
from slurmforge.deploy.k8s import kustomize, render
from slurmforge.deploy.k8s.kubectl import Kubectl, kubectl_path
from slurmforge.deploy.roles import JAIL
from slurmforge.deploy.slurm import siteconf
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import ConfigError, DeployError

# API groups of operators a site may run, whose objects are applied only where served
CUSTOM_RESOURCES = ("monitoring.coreos.com/v1",)
# libyaml's parser where PyYAML has it: the same objects, several times faster
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def known_versions() -> list[str]:
    """Kubernetes minor versions kubernetes-validate has strict schemas for."""
    from kubernetes_validate import utils

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    return sorted({".".join(v.split(".")[:2]) for v in utils.all_versions()}, key=key)


class Manifests:
    """``cluster``'s objects in ``directory``, for ``namespace``; images are found in the push
    lock under ``root``, else in ``engine`` (when one answers)."""

    def __init__(
        self,
        cluster: Cluster,
        directory: Path,
        namespace: str,
        root: Path,
        k: Kubectl,
        engine: Any | None = None,
    ) -> None:
        self.cluster = cluster
        self.dir = directory
        self.namespace = namespace
        self.root = root  # where build/images.lock.json is
        self.k = k
        self.engine = engine
        self.objects: dict[str, dict[str, Any]] = {}  # file name → object, once written
        self.populate_job = ""

    def write(self) -> Path:
        """Render the cluster's objects and write them, with their kustomization, to
        ``self.dir``; returns it."""
        if sssd.embedded(self.cluster.spec):
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
        renderer = render.ManifestRenderer(self.cluster, images, self.namespace)
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
        from kubernetes_validate import utils

        # it reads a kind's schema and the version's definitions (megabytes of JSON) from disk
        # for every object it checks; they never change, so each is read once a process
        if not hasattr(utils.schema_contents, "cache_info"):
            utils.schema_contents = functools.cache(utils.schema_contents)

        versions = self.check_versions()
        for name in self.objects:
            # what kubectl will send
            obj = yaml.load((self.dir / name).read_text(), Loader=_LOADER)
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

    def rewrite(self, name: str, obj: dict[str, Any]) -> None:
        """Replace the object of file ``name`` with ``obj``, in memory and on disk (what apply
        sends a server that takes it in another version)."""
        self.objects[name] = obj
        (self.dir / name).write_text(kustomize.dump(obj, str(self.cluster.path)))

    def of(self, kind: str, name: str) -> dict[str, Any]:
        """The rendered object of that kind and name."""
        return next(
            o for o in self.objects.values() if o["kind"] == kind and o["metadata"]["name"] == name
        )

    def named(self, *kinds: str) -> list[str]:
        """The files of the objects of these kinds, in the order they are written."""
        return [n for n, o in self.objects.items() if o["kind"] in kinds]
