"""Shortest job first by the true duration: an oracle, as a reference for the simulator.

Only the simulator knows durations (``PendingJob.oracle_duration_s``); elsewhere the time limit
stands in, and jobs with neither go last, FIFO."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gpufleet.scheduler.plugins.base import OrderBase
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "order/sjf"


def duration_of(p: PendingJob) -> float:
    if p.oracle_duration_s is not None:
        return p.oracle_duration_s
    return p.spec.time_limit_s if p.spec.time_limit_s is not None else float("inf")


class Plugin(OrderBase):
    def __init__(self, by: str = "duration") -> None:
        if by not in ("duration", "gpu_time"):
            raise ValueError("by must be 'duration' or 'gpu_time'")
        self.by = by

    def _key(self, p: PendingJob) -> tuple[float, float, int]:
        d = duration_of(p)
        if self.by == "gpu_time":
            d *= max(1, p.spec.workers * p.spec.gpus_per_worker)
        return (d, p.submit_time, p.seq)

    def order(
        self, pending: Sequence[PendingJob], snap: Snapshot, usage: QueueUsage
    ) -> Iterator[PendingJob]:
        return iter(sorted(pending, key=self._key))

    def outranks(self, job: PendingJob, victim: RunningJob, snap: Snapshot) -> bool:
        return False
