"""Replacing running nodes after their jobs, a batch at a time: the order both targets keep when
a deploy changes nodes' definitions (local/roll.py, k8s/roll.py).

Per node set, ``disruption.max_unavailable`` nodes at once: each is taken (drained, its jobs
given ``disruption.max_wait``, what still runs requeued under its job ID or told and cancelled:
images/slurmd/node-state), then replaced, and the batch is in service again (or in the drain
``kept`` says it was in) before the next is taken. slurmctld must answer first: a node that
cannot ask it about its jobs would be replaced under them."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from slurmforge.deploy.slurm import ctl
from slurmforge.deploy.spec.disruption import DisruptionSpec
from slurmforge.errors import DeployError

Shell = Callable[[str], tuple[int, str]]


def roll(
    sh: Shell,
    sets: dict[str, list[str]],
    plan: DisruptionSpec,
    take: Callable[[str, int], tuple[int, str]],
    replace: Callable[[list[str]], object],
    kept: dict[str, str],
    timeout: float,
    log,
    step: int | None = None,
) -> None:
    """Replace the nodes of ``sets`` (node set → its changed nodes), ``step`` (else
    ``plan.max_unavailable``) of a set at a time: ``take(node, wait)`` for each node of a batch
    at once (node-state in it: its exit status and what it printed), then ``replace(names)``."""
    if not sets:
        return
    deadline = time.monotonic() + timeout
    while ctl.nodes(sh) is None:
        if time.monotonic() > deadline:
            raise DeployError(
                f"slurmctld did not answer within {timeout:.0f} s; no node was replaced"
            )
        time.sleep(1)
    for nodes in sets.values():
        size = step or plan.max_unavailable
        for names in (nodes[i : i + size] for i in range(0, len(nodes), size)):
            its = "its" if len(names) == 1 else "their"
            print(
                f"note: replacing {', '.join(names)} ({its} definition changed): drained, {its} "
                f"jobs get up to {plan.max_wait} s (disruption.max_wait)",
                file=log,
            )
            with ThreadPoolExecutor(len(names)) as pool:
                done = list(pool.map(lambda n: take(n, plan.max_wait), names))
            for name, (code, out) in zip(names, done, strict=True):
                if code:
                    raise DeployError(f"{name}: taking it for its replacement failed: {out[-300:]}")
                for line in out.splitlines():
                    print(f"note: {line}", file=log)
            ctl.bring_up(sh, names, replace, kept, timeout)
