"""The `k8s` target's output: one file per object and their kustomization.yaml, in a directory
that `kubectl kustomize` renders and `kubectl apply -k` applies by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmforge.deploy import generated


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
