"""Slurm's compact form of a list of node names (its hostlist grammar, as far as slurmforge
writes it: one prefix, numbered nodes)."""

from __future__ import annotations


def hostlist(nodes: list[str]) -> str:
    """Slurm's compact form of ``<prefix>-<i>`` names: cpu-[0-3,5]; one name stays as is."""
    if not nodes:
        return ""
    if len(nodes) == 1:
        return ",".join(nodes)
    prefix = nodes[0].rsplit("-", 1)[0]
    numbers = sorted(int(n.rsplit("-", 1)[1]) for n in nodes)
    ranges: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return f"{prefix}-[{','.join(ranges)}]"
