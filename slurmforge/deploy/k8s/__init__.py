"""The `k8s` target: a kustomize directory applied with kubectl."""
