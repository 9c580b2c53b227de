"""Shared ordering of preemption victims: least lost work first."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.scheduler.snapshot import RunningJob


def cheapest_first(victims: Iterable[RunningJob], now: float) -> list[RunningJob]:
    return sorted(
        (v for v in victims if v.spec.preemptible),
        # v.lost_work(now), written out (the same product), first
        key=lambda v: ((now - v.start_time) * v.spec.total_gpu_milli / 1000, -v.start_time, v.id),
    )
