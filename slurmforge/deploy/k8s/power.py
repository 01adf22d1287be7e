"""Elastic node sets on Kubernetes: who may start and stop their nodes.

slurmctld's ResumeProgram and SuspendProgram are the same on both targets: each leaves one
request per node in a directory (roles.POWER_SPOOL). Here that directory is an emptyDir that the
slurmctld container shares with a second container of its pod, node-power (the agent of the
local target, images/exporter/node_power.py, with the Kubernetes API as its engine). It alone
gets a service-account token, mounted into it and no other container: the ServiceAccount's Role
in the cluster's namespace allows getting and patching the scale of the elastic nodes'
Deployments, named one by one, and nothing else. slurmctld holds no token.
"""

from __future__ import annotations

from typing import Any

from slurmforge.deploy import roles
from slurmforge.deploy.k8s import kustomize
from slurmforge.deploy.k8s.access import AccessRenderer
from slurmforge.deploy.slurm import ctl
from slurmforge.deploy.spec.model import ClusterSpec

ACCOUNT = roles.NODE_POWER  # the ServiceAccount, its Role and the RoleBinding
SPOOL_VOLUME = roles.POWER_VOLUME


def nodes(spec: ClusterSpec) -> list[str]:
    """The elastic nodes, each its own Deployment of that name."""
    return [node for ns in spec.nodesets for node in ns.elastic_nodes]


class PowerRenderer(AccessRenderer):
    def power_access(self) -> dict[str, dict[str, Any]]:
        """The ServiceAccount node-power runs as, its Role and the binding."""
        rule = {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale"],
            "resourceNames": nodes(self.spec),
            "verbs": ["get", "patch"],
        }
        return self.account(ACCOUNT, roles.NODE_POWER, [rule])

    def with_node_power(self, pod: dict[str, Any], image: str) -> None:
        """slurmctld's pod, given the request directory and the node-power container."""
        spool = {"name": SPOOL_VOLUME, "mountPath": roles.POWER_SPOOL}
        pod["containers"][0]["volumeMounts"].append(spool)
        role = roles.role(roles.NODE_POWER)
        env = [{"name": "NODE_POWER_ENGINE", "value": "kubernetes"}]
        pod["containers"].append(
            self.container(role, image, [spool, self.token_mount(ACCOUNT)], env=env)
        )
        self.with_token(pod, ACCOUNT)
        pod["volumes"].append({"name": SPOOL_VOLUME, "emptyDir": {}})


def scales(kube: Any) -> dict[str, int]:
    """The elastic nodes' Deployments the server has → the scale each has there."""
    return {
        item["metadata"]["name"]: item["spec"].get("replicas", 0)
        for item in kube.k.get("deployments", **{"app.kubernetes.io/component": roles.NODE})
    }


def keep_running(kube: Any) -> list[str]:
    """Before an apply: each elastic node's Deployment keeps the scale the server gives it (a
    node Slurm started goes on running; the file says so too). Returns the elastic nodes the
    server runs that the cluster file no longer has, for ``remove`` once applied (all of them
    when it has none elastic any more)."""
    running = scales(kube)
    for name, obj in kube.manifests.objects.items():
        node = obj["metadata"]["name"]
        if obj["kind"] == "Deployment" and node in running and running[node]:
            obj["spec"]["replicas"] = running[node]
            (kube.dir / name).write_text(kustomize.dump(obj, str(kube.cluster.path)))
    return sorted(set(running) - set(nodes(kube.cluster.spec)))


def remove(kube: Any, gone: list[str], timeout: float) -> None:
    """Delete the Deployments of elastic nodes the cluster file no longer has."""
    if gone:
        wait = f"--timeout={int(timeout)}s"
        argv = kube.k.argv("delete", *(f"deployment/{n}" for n in gone), "--wait=true", wait)
        kube.k.check(argv, f"deleting the Deployments of {', '.join(gone)}")


def start_powered_up(kube: Any, kept: dict[str, str], timeout: float) -> None:
    """Scale to one the elastic nodes' Deployments at zero whose nodes Slurm counts as powered up
    (a restore of a backup taken while they ran applies them at zero, as it applies every
    elastic node), and wait until each has registered and is in service: what Slurm thinks
    runs, runs."""
    elastic = nodes(kube.cluster.spec)
    up = ctl.powered_up(ctl.nodes(kube.controller_sh), elastic) if elastic else []
    if not up:
        return
    scaled = scales(kube)
    stopped = [node for node in up if not scaled.get(node)]
    if not stopped:
        return
    print(f"note: starting {', '.join(stopped)}: Slurm has them powered up", file=kube.log)

    def scale_up(names: list[str]) -> None:
        argv = kube.k.argv("scale", *(f"deployment/{n}" for n in names), "--replicas=1")
        kube.k.check(argv, f"starting {', '.join(names)}")

    ctl.bring_up(kube.controller_sh, stopped, scale_up, kept, timeout)
