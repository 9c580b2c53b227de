"""Preempt by the order plugin's own rule (LAS: a job in a lower attained-service queue
preempts jobs that have crossed into a higher one), least lost work first."""

from __future__ import annotations

from collections.abc import Hashable

from gpufleet.scheduler.framework import Admission, OrderPlugin
from gpufleet.scheduler.plugins._preempt_common import cheapest_first
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "preempt/order"


class Plugin:
    def victims(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> list[RunningJob]:
        outranked = getattr(order, "outranked", None)  # all at once, where the order can
        if outranked is not None:
            return cheapest_first(outranked(job, snap), snap.now)
        return cheapest_first((r for r in snap.running if order.outranks(job, r, snap)), snap.now)

    def victims_key(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Hashable | None:
        """Jobs of one key get the same victims in one snapshot: the order's ``outrank_key``
        when it has one (LAS: the pending job's level); None (no memo) otherwise."""
        key = getattr(order, "outrank_key", None)
        return None if key is None else key(job, snap)
