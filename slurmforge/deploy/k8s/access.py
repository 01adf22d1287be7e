"""Who of the cluster's pods may use the Kubernetes API: a ServiceAccount per agent that needs
it, its rules, and its token, mounted into that agent's container alone.

No other pod of the cluster gets a token (workloads.py turns the automatic mount off). A token is
projected (it expires within TOKEN_SECONDS and the kubelet renews it) with the cluster's CA and
the namespace beside it, where clients look for them.
"""

from __future__ import annotations

from typing import Any

from slurmforge.deploy.k8s.pods import PodRenderer

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where clients look for it
TOKEN_SECONDS = 3600  # the kubelet renews it before it expires
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC = f"{RBAC_GROUP}/v1"


def token_volume(account: str) -> str:
    return f"{account}-token"


class AccessRenderer(PodRenderer):
    def account(
        self,
        name: str,
        component: str,
        rules: list[dict[str, Any]],
        cluster_rules: list[dict[str, Any]] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """File name → object: the ServiceAccount ``name``, a Role of ``rules`` in the
        namespace, and, with ``cluster_rules``, a ClusterRole of those (named after the
        namespace too: it is cluster-wide), each bound to the account."""
        meta = self.meta(name, component)
        subject = {"kind": "ServiceAccount", "name": name, "namespace": self.namespace}
        out = {
            f"serviceaccount-{name}.yaml": {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": meta,
                "automountServiceAccountToken": False,
            },
            f"role-{name}.yaml": {
                "apiVersion": RBAC,
                "kind": "Role",
                "metadata": meta,
                "rules": rules,
            },
            f"rolebinding-{name}.yaml": {
                "apiVersion": RBAC,
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
                "subjects": [subject],
            },
        }
        if cluster_rules:
            wide = f"{self.namespace}-{name}"
            cluster_meta = {"name": wide, "labels": meta["labels"]}
            role_ref = {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": wide}
            out[f"clusterrole-{name}.yaml"] = {
                "apiVersion": RBAC,
                "kind": "ClusterRole",
                "metadata": cluster_meta,
                "rules": cluster_rules,
            }
            out[f"clusterrolebinding-{name}.yaml"] = {
                "apiVersion": RBAC,
                "kind": "ClusterRoleBinding",
                "metadata": cluster_meta,
                "roleRef": role_ref,
                "subjects": [subject],
            }
        return out

    @staticmethod
    def token_mount(account: str) -> dict[str, Any]:
        return {"name": token_volume(account), "mountPath": TOKEN_DIR, "readOnly": True}

    @staticmethod
    def with_token(pod: dict[str, Any], account: str) -> None:
        """``pod`` runs as ``account``; its token is a volume, for the one container that
        mounts it (token_mount)."""
        pod["serviceAccountName"] = account
        token = {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}}
        ca_file = [{"key": "ca.crt", "path": "ca.crt"}]
        ca = {"configMap": {"name": "kube-root-ca.crt", "items": ca_file}}
        namespace = {
            "downwardAPI": {
                "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
            }
        }
        pod["volumes"].append(
            {"name": token_volume(account), "projected": {"sources": [token, ca, namespace]}}
        )
