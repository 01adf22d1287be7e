"""The ports the tiers publish their clusters on: never two the same within one cluster."""

from tests.ports import free_ports, published


def test_a_clusters_published_ports_are_all_different_and_avoid_a_given_login_port() -> None:
    for _ in range(200):
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
