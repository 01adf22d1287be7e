"""Which Slurm upgrades a deploy makes and which it refuses, by Slurm's own rule (its release
notes: 25.11 upgrades from 25.05, 24.11 and 24.05; 26.05 from 25.11, 25.05 and 24.11; 24.05
from 23.11 and 23.02)."""

from __future__ import annotations

import pytest

from slurmforge.deploy.slurm import upgrade
from slurmforge.errors import ConfigError


@pytest.mark.parametrize(
    ("major", "sources"),
    [
        ("24.05", ["23.02", "23.11"]),
        ("24.11", ["23.02", "23.11", "24.05"]),
        ("25.11", ["24.05", "24.11", "25.05"]),
        ("26.05", ["24.11", "25.05", "25.11"]),
    ],
)
def test_each_release_upgrades_from_the_ones_slurm_names(major: str, sources: list[str]) -> None:
    assert upgrade.upgrades_from(major) == sources


def test_a_patch_release_is_no_upgrade_and_a_new_series_is() -> None:
    assert upgrade.check("c.yaml: images", "c", "24.05.7", "24.05.8") is False
    assert upgrade.check("c.yaml: images", "c", "24.05.8", "25.11.7") is True
    assert upgrade.check("c.yaml: images", "c", "25.11.7", "26.05.3") is True


@pytest.mark.parametrize(
    ("running", "wanted", "message", "hint"),
    [
        ("24.05.8", "26.05.3", "Slurm 26.05 upgrades only from 24.11, 25.05, 25.11",
         "upgrade through Slurm 25.11 first"),
        ("23.11.11", "25.11.7", "Slurm 25.11 upgrades only from 24.05, 24.11, 25.05",
         "upgrade through Slurm 25.05 first"),
        ("25.11.7", "24.05.8", "Slurm cannot go back to 24.05.8", "Slurm 25.11 or newer"),
    ],
)  # fmt: skip
def test_what_slurm_cannot_do_is_refused_in_one_line(running, wanted, message, hint) -> None:
    with pytest.raises(ConfigError) as exc:
        upgrade.check("c.yaml: images", "c", running, wanted)
    assert exc.value.message.startswith(f"c.yaml: images: cluster c runs Slurm {running}; ")
    assert message in exc.value.message and "\n" not in exc.value.message
    assert hint in (exc.value.hint or "")
    assert exc.value.exit_code == 2


def test_a_version_outside_slurms_release_sequence_is_refused_not_guessed() -> None:
    with pytest.raises(ConfigError, match=r"c.yaml: images: Slurm 24.06.1 is no release of"):
        upgrade.check("c.yaml: images", "c", "24.05.8", "24.06.1")
