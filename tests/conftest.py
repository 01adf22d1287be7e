from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def shipped() -> dict:
    """The shipped versions.yaml as plain data, for tests to mutate."""
    return yaml.safe_load((ROOT / "versions.yaml").read_text())


@pytest.fixture
def write_config(tmp_path: Path):
    """Write data as versions.yaml into a temporary project (with a copy of images/)."""

    def write(data: dict, text: str | None = None) -> Path:
        path = tmp_path / "versions.yaml"
        path.write_text(text if text is not None else yaml.safe_dump(data, sort_keys=False))
        return path

    return write
