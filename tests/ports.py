"""Host ports for the clusters and servers tests start. Every one is a free port the kernel
picks, never a fixed number: the suite runs beside the cluster README's first command leaves up
(login 2222, REST 6820, Prometheus 9090) and beside other runs of itself."""

from __future__ import annotations

import socket
from typing import Any


def free_port(address: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``address`` (this host's)."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def published(login: int | None = None) -> dict[str, Any]:
    """The cluster file keys of every port a local cluster publishes, each a free one (the
    login port may be given: a test that needs it busy). Prometheus scrapes every 3 s."""
    return {
        "login": {"address": "127.0.0.1", "port": login or free_port()},
        "rest": {"port": free_port()},
        "metrics": {"prometheus": {"port": free_port(), "scrape_interval": 3}},
    }
