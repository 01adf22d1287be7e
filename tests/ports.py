"""Host ports for the clusters and servers tests start. Every one is a free port drawn at random
from a band (BAND), never a fixed number: the suite runs beside the cluster README's first
command leaves up (login 2222, REST 6820, Prometheus 9090) and beside other runs of itself."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The ports handed out lately, by every process of every run on this host. A port is free when
# it is picked and taken only when its cluster starts, a minute or several later; meanwhile a
# test in another lane may find it free too, and the second `up` fails "port is already
# allocated" (a fresh run's upgrade test, its Prometheus port taken by a waiting-lane cluster).
# A pick is kept out of others' hands for RESERVED seconds.
LEDGER = Path(tempfile.gettempdir()) / "slurmforge-test-ports"
RESERVED = 1800.0
# Picks come from this band, never from the kernel's ephemeral range (ip_local_port_range,
# 32768-60999 by default): a port picked free there is also the kernel's to give to any outgoing
# connection (an ssh, a kubectl, a scrape) until its cluster binds it, and in a fresh run a
# cluster's REST port, picked free, was the local end of some connection a minute later
# ("listen tcp4 127.0.0.1:36041: bind: address already in use"). Below Kubernetes' NodePorts too.
BAND = range(20000, 30000)
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


@contextlib.contextmanager
def _ledger() -> Iterator[set[int]]:
    """The ports picked in the last RESERVED seconds, under the ledger's lock; what the caller
    adds to the set is recorded as picked now."""
    # in a directory every user may write to: never through a link, never another user's file
    fd = os.open(LEDGER, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    if os.fstat(fd).st_uid != os.getuid():
        os.close(fd)
        raise RuntimeError(f"{LEDGER} belongs to another user; remove it")
    with os.fdopen(fd, "r+", encoding="ascii") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        now = time.time()
        kept: dict[int, float] = {}
        for line in f:
            port, _, when = line.partition(" ")
            with contextlib.suppress(ValueError):
                if now - float(when) < RESERVED:
                    kept[int(port)] = float(when)
        recent = set(kept)
        yield recent
        kept.update((port, now) for port in recent - set(kept))
        f.seek(0)
        f.truncate()
        f.writelines(f"{port} {when}\n" for port, when in kept.items())


def free_ports(
    count: int, address: str = "127.0.0.1", taken: frozenset[int] = frozenset()
) -> list[int]:
    """``count`` different ports of BAND nothing listens on at ``address``, none of them in
    ``taken``, and none handed out by this or another process in the last RESERVED seconds (the
    ledger above)."""
    low, high = map(int, EPHEMERAL.read_text().split())
    band = [port for port in BAND if not low <= port <= high]
    if not band:
        raise RuntimeError(f"{EPHEMERAL} ({low}-{high}) covers the test ports' band {BAND}")
    random.shuffle(band)
    with _ledger() as recent:
        ports: list[int] = []
        for port in band:
            if port in taken or port in recent:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind((address, port))
                except OSError:
                    continue
            ports.append(port)
            if len(ports) == count:
                recent.update(ports)
                return ports
    raise RuntimeError(f"fewer than {count} free ports in {BAND} at {address}")


def free_port(address: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``address`` (this host's)."""
    return free_ports(1, address)[0]


def published(login: int | None = None) -> dict[str, Any]:
    """The cluster file keys of every port a local cluster publishes, each a free one and no two
    the same (the login port may be given: a test that needs it busy, or one picked before).
    Prometheus scrapes every 3 s; the portal's port is there for a test that enables it."""
    if login is None:
        login, rest, prometheus, portal = free_ports(4)
    else:
        rest, prometheus, portal = free_ports(3, taken=frozenset({login}))
    return {
        "login": {"address": "127.0.0.1", "port": login},
        "rest": {"port": rest},
        "metrics": {"prometheus": {"port": prometheus, "scrape_interval": 3}},
        "portal": {"port": portal},
    }
