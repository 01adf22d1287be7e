"""Build tier: `invoke build` itself (failures contained, bad input, the no-op path) on copies of
the project, against the `default` set's images (built on demand)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.build)
