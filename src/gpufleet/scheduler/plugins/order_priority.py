"""Highest priority first; FIFO among equals (Slurm's priority/basic, Kueue's default)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gpufleet.scheduler.plugins.base import OrderBase
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "order/priority"


class Plugin(OrderBase):
    def order(
        self, pending: Sequence[PendingJob], snap: Snapshot, usage: QueueUsage
    ) -> Iterator[PendingJob]:
        return iter(sorted(pending, key=lambda p: (-p.spec.priority, p.submit_time, p.seq)))

    def outranks(self, job: PendingJob, victim: RunningJob, snap: Snapshot) -> bool:
        return job.spec.priority > victim.spec.priority
