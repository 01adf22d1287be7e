"""The jail's GPU health check script: its all_reduce_perf parser, on fixtures written from the
nccl-tests output format (current '#wrong' columns with in-place and out-of-place bus bandwidth,
the older 'error' column without 'root', and a run with validation off and no average line)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys

import pytest

from tests.common import ROOT

SCRIPT = ROOT / "rootfs" / "opt" / "slurmforge" / "gpu-check"
FIXTURES = ROOT / "tests" / "fixtures" / "nccl"


def _load():
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


gpu_check = _load()


def test_current_format_uses_the_reported_average() -> None:
    result = gpu_check.parse((FIXTURES / "all_reduce_v2.txt").read_text())
    assert [r.size for r in result.rows] == [2**29, 2**30, 2**31, 2**32, 2**33]
    assert result.rows[-1].busbw_out_of_place == 402.92
    assert result.rows[-1].busbw_in_place == 402.99
    assert result.avg_busbw == 393.304
    assert result.busbw == 393.304


def test_older_format_with_error_column_and_no_root() -> None:
    result = gpu_check.parse((FIXTURES / "all_reduce_old_error_column.txt").read_text())
    assert [(r.size, r.busbw_out_of_place, r.busbw_in_place) for r in result.rows] == [
        (8, 0.0, 0.0),
        (1048576, 20.0, 20.18),
        (134217728, 48.45, 48.47),
    ]
    assert result.busbw == 22.7717


def test_without_average_line_judges_by_the_worse_of_both_columns() -> None:
    result = gpu_check.parse((FIXTURES / "all_reduce_no_check_no_avg.txt").read_text())
    assert result.avg_busbw is None
    assert result.busbw == pytest.approx((52.50 + 52.79) / 2)


@pytest.mark.parametrize(
    "text",
    ["", "NCCL WARN Cuda failure 'no CUDA-capable device is detected'\n", "# size busbw\n1 2\n"],
)
def test_output_without_a_table_has_no_bandwidth(text: str) -> None:
    assert gpu_check.parse(text).busbw is None


def test_outside_a_job_it_refuses_and_changes_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--min-busbw", "10"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 3
    assert "not in a Slurm job" in proc.stderr
