"""Host ports for the clusters and servers tests start. Every one is a free port the kernel
picks, never a fixed number: the suite runs beside the cluster README's first command leaves up
(login 2222, REST 6820, Prometheus 9090) and beside other runs of itself."""

from __future__ import annotations

import contextlib
import socket
from typing import Any


def free_ports(
    count: int, address: str = "127.0.0.1", taken: frozenset[int] = frozenset()
) -> list[int]:
    """``count`` different ports nothing listens on at ``address``, none of them in ``taken``.
    Their sockets stay bound until all are picked: a port closed a moment ago is the kernel's
    next answer as often as not, so one-at-a-time picks repeat (CI gave a cluster's login and
    Prometheus the same port)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(socket.socket())
            sock.bind((address, 0))
            port = sock.getsockname()[1]
            if port not in taken and port not in ports:
                ports.append(port)
        return ports


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
