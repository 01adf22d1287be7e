"""A registry that cannot be reached is bad input to every command that talks to one: one line,
exit 2, as plain `invoke push` says it (the registry tier pushes to a real one)."""

from __future__ import annotations

import subprocess

import pytest

from slurmforge import manifest_list
from slurmforge.errors import ConfigError
from tests.unit.helpers import assert_clean_failure, run_invoke

# what docker's CLI printed here for a registry on a closed port
REFUSED = (
    'failed to configure transport: error pinging v2 registry: Get "https://127.0.0.1:1/v2/": '
    "dial tcp 127.0.0.1:1: connect: connection refused"
)


def test_push_lists_to_an_unreachable_registry_is_refused_in_one_line() -> None:
    """The real docker CLI against a closed port (nothing listens on 127.0.0.1:1)."""
    proc = run_invoke("push", "--lists", "--set", "grace", "--registry", "127.0.0.1:1/sf")
    assert_clean_failure(proc, "registry 127.0.0.1:1 is unreachable: ")
    assert "connection refused" in proc.stderr
    assert "hint: check --registry / the set's registry, and that it is running" in proc.stderr
    assert "['" not in proc.stderr  # no Python list's repr


@pytest.mark.parametrize("step", ["inspect", "create", "push"])
def test_each_manifest_step_says_an_unreachable_registry_as_push_does(step: str) -> None:
    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        failing = argv[2] == step
        return subprocess.CompletedProcess(argv, 1 if failing else 0, "", REFUSED)

    tag, member = (
        "127.0.0.1:1/sf/slurmd:24.05",
        "127.0.0.1:1/sf/slurmd:24.05-amd64@sha256:" + "a" * 64,
    )
    with pytest.raises(ConfigError) as refused:
        if step == "inspect":
            manifest_list.image_digest("127.0.0.1:1/sf/slurmd:24.05-amd64", "amd64", run)
        else:
            manifest_list.publish(tag, {"amd64": member}, run)
    assert refused.value.message == f"registry 127.0.0.1:1 is unreachable: {REFUSED}"
    assert refused.value.exit_code == 2


def test_another_registry_error_stays_a_failed_operation() -> None:
    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "denied: requested access is refused")

    with pytest.raises(manifest_list.ManifestListError, match="denied"):
        manifest_list.image_digest("127.0.0.1:1/sf/slurmd:24.05-amd64", "amd64", run)
