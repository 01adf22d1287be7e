"""The ports the tiers publish their clusters on: never two the same within one cluster, nor one
another process picked a moment ago."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import ports
from tests.ports import free_ports, published


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ledger of this test's own, so that its picks keep no port from the suite's clusters."""
    path = tmp_path / "ledger"
    monkeypatch.setattr(ports, "LEDGER", path)
    return path


def test_a_clusters_published_ports_are_all_different_and_avoid_a_given_login_port() -> None:
    for _ in range(40):
        login = free_ports(1)[0]
        ports = published(login)
        chosen = [login, ports["rest"]["port"], ports["metrics"]["prometheus"]["port"]]
        chosen.append(ports["portal"]["port"])
        assert len(set(chosen)) == 4, chosen
        fresh = published()
        chosen = [
            fresh["login"]["port"],
            fresh["rest"]["port"],
            fresh["metrics"]["prometheus"]["port"],
            fresh["portal"]["port"],
        ]
        assert len(set(chosen)) == 4, chosen


def test_free_ports_skips_what_is_taken() -> None:
    first = free_ports(5)
    assert len(set(first)) == 5
    assert not set(free_ports(5, taken=frozenset(first))) & set(first)


def test_no_pick_is_a_port_the_kernel_gives_to_outgoing_connections() -> None:
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    picked = free_ports(50) + [published()["rest"]["port"] for _ in range(10)]
    assert not [port for port in picked if low <= port <= high], (low, high, picked)


def test_a_port_another_process_picked_lately_is_not_picked_again(ledger: Path) -> None:
    # another process picks a few (as another lane's cluster does)
    code = f"from tests import ports; ports.LEDGER = {str(ledger)!r}; print(*ports.free_ports(3))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=Path(__file__).parents[2])  # fmt: skip
    theirs = {int(port) for port in other.stdout.split()}
    now = time.time()
    # and others picked two ports in every three of the band
    with ledger.open("a") as f:
        f.writelines(f"{port} {now}\n" for port in ports.BAND if port % 3)
    mine = free_ports(5)
    assert not set(mine) & theirs, (mine, theirs)
    assert all(port % 3 == 0 for port in mine), mine


def test_a_pick_is_forgotten_once_reserved(ledger: Path) -> None:
    ledger.write_text(f"40000 {time.time() - ports.RESERVED - 1}\nnot a line\n")
    mine = free_ports(2)
    kept = {int(line.split()[0]) for line in ledger.read_text().splitlines()}
    assert kept == set(mine), ledger.read_text()
