"""Preempt by the order plugin's own rule (LAS: a job in a lower attained-service queue
preempts jobs that have crossed into a higher one), least lost work first."""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from gpufleet.scheduler.framework import Admission, OrderPlugin
from gpufleet.scheduler.plugins.base import PreemptBase
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "preempt/order"


class Plugin(PreemptBase):
    def candidates(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Iterable[RunningJob]:
        return order.outranked(job, snap)

    def victims_key(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Hashable | None:
        """Jobs of one key get the same victims in one snapshot: the order's ``outrank_key``
        (LAS: the pending job's level; None, no memo, for orders without one)."""
        return order.outrank_key(job, snap)
