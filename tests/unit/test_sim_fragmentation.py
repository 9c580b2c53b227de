"""GPUs idle by fragmentation from a replay's rows (sim/fragmentation.py)."""

from __future__ import annotations

import pytest

from gpufleet.sim.fragmentation import idle_by_fragmentation
from gpufleet.sim.metrics import JobRow


def row(id: str, gpus: float, submit: float, *runs: tuple[float, float]) -> JobRow:
    end = runs[-1][1] if runs else None
    first = runs[0][0] if runs else None
    return JobRow(id, "q", gpus, submit, 0.0, first, end, "SUCCEEDED", 1, 0, 0.0, runs=runs)


def test_free_gpus_count_while_a_large_job_waits_that_their_number_could_hold() -> None:
    """16 GPUs; a 4-GPU job runs 0-100 and another 4-GPU job 0-50; an 8-GPU job waits from
    10 to 100. From 10 to 50, 8 free (enough): 8 x 40; from 50 to 100, 12 free: 12 x 50."""
    rows = [
        row("a", 4, 0, (0, 100)),
        row("b", 4, 0, (0, 50)),
        row("g", 8, 10, (100, 200)),
    ]
    f = idle_by_fragmentation(rows, capacity=16, large_gpus=8)
    assert f.idle_gpu_s == pytest.approx(8 * 40 + 12 * 50)
    assert f.blocked_s == pytest.approx(90)
    assert f.capacity_gpu_s == 16 * 200


def test_a_wait_for_gpus_that_are_not_free_is_not_fragmentation() -> None:
    """12 of 16 GPUs busy while the 8-GPU job waits: too few free, nothing counted; a small
    job's wait never counts."""
    rows = [
        row("a", 12, 0, (0, 100)),
        row("g", 8, 10, (100, 150)),
        row("s", 1, 0, (120, 130)),
    ]
    f = idle_by_fragmentation(rows, capacity=16, large_gpus=8)
    assert f.idle_gpu_s == 0.0 and f.blocked_s == 0.0


def test_a_requeued_large_job_waits_again_between_its_attempts() -> None:
    rows = [row("g", 8, 0, (0, 10), (30, 40))]  # preempted at 10, back at 30
    f = idle_by_fragmentation(rows, capacity=16, large_gpus=8)
    assert f.idle_gpu_s == pytest.approx(16 * 20) and f.blocked_s == pytest.approx(20)
