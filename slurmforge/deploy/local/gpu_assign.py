"""Which GPUs of the host each GPU node gets, and the driver whose files they all mount.

A node set asks for GPUs through its GRES (``gpu[:type]:count``). On one host every node would
otherwise see every GPU, so each node is given its own device nodes, in order, and a request for
more GPUs than the host has is refused before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from slurmforge import gpu_driver
from slurmforge.deploy.spec.model import Cluster
from slurmforge.errors import ConfigError


@dataclass(frozen=True)
class Assignment:
    driver: gpu_driver.Driver | None = None
    nodes: dict[str, tuple[gpu_driver.Device, ...]] = field(default_factory=dict)  # node → its GPUs

    def shared_devices(self) -> tuple[gpu_driver.Device, ...]:
        """Control devices every GPU node needs (nvidiactl, nvidia-uvm, …)."""
        if self.driver is None:
            return ()
        return tuple(d for d in self.driver.devices if d not in self.driver.gpus)

    def gres_files(self) -> dict[str, list[str]]:
        return {node: [d.container for d in devs] for node, devs in self.nodes.items()}


def assign(cluster: Cluster) -> Assignment:
    wanted = [(i, ns) for i, ns in enumerate(cluster.spec.nodesets) if ns.gpus and ns.replicas]
    if not wanted:
        return Assignment()
    root = cluster.spec.gpu.driver_root
    driver = gpu_driver.discover(Path(root))
    if driver is None:
        i, ns = wanted[0]
        raise ConfigError(
            f"{cluster.path}: nodesets[{i}]: node set {ns.name!r} requests GPUs "
            f"({', '.join(ns.gres)}) but there is no NVIDIA driver under {root} (CPU mode)",
            hint="deploy it on a GPU host, point gpu.driver_root at the driver, or scale it to 0",
        )
    for i, ns in wanted:  # one host, one driver: its libraries load on nodes of its arch only
        if cluster.arch(ns) != driver.arch:
            raise ConfigError(
                f"{cluster.path}: nodesets[{i}].arch: node set {ns.name!r} is "
                f"{cluster.arch(ns)} but the driver under {root} is {driver.arch}",
                hint=f"give it arch: {driver.arch}, or deploy it on a host of its arch",
            )
    need = sum(ns.gpus * ns.replicas for _, ns in wanted)
    if need > len(driver.gpus):
        names = ", ".join(f"{ns.name} ({ns.replicas} nodes x {ns.gpus})" for _, ns in wanted)
        raise ConfigError(
            f"{cluster.path}: nodesets: {names} need {need} GPUs but the host under {root} has "
            f"{len(driver.gpus)} ({', '.join(d.container for d in driver.gpus)})"
        )
    free = iter(driver.gpus)
    nodes = {
        node: tuple(next(free) for _ in range(ns.gpus)) for _, ns in wanted for node in ns.nodes
    }
    return Assignment(driver, nodes)
