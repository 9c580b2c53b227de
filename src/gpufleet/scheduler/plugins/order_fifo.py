"""First come, first served: by submit time, then arrival sequence."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gpufleet.scheduler.plugins.base import OrderBase
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "order/fifo"


class Plugin(OrderBase):
    def order(
        self, pending: Sequence[PendingJob], snap: Snapshot, usage: QueueUsage
    ) -> Iterator[PendingJob]:
        if pending is snap.pending and snap.pending_index is not None:
            return iter(pending)  # the index comes only with pending in this very order
        # pending arrives in arrival order already; sorted() on sorted input is linear
        return iter(sorted(pending, key=lambda p: (p.submit_time, p.seq)))

    def outranks(self, job: PendingJob, victim: RunningJob, snap: Snapshot) -> bool:
        return False
