"""Weighted dominant-resource fair share across queues, with decayed past usage.

A queue's share is its dominant share of the cluster now (DRF: the largest of its GPU, CPU and
memory fractions) plus its decayed past usage expressed in the same unit (share·s divided by
the decay's mean life), divided by its weight. The queue with the lowest share goes next; inside
a queue, priority then FIFO. Shares are re-read after each job, so a cycle that admits jobs
interleaves queues instead of draining the first one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from operator import attrgetter

from gpufleet.scheduler.plugins.base import OrderBase
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "order/fairshare"
SLURM_DEFAULT_HALF_LIFE_S = 7 * 86400.0
_ARRIVAL = attrgetter("submit_time", "seq")
_PRIORITY = attrgetter("spec.priority")


class Plugin(OrderBase):
    def __init__(self, half_life_s: float = SLURM_DEFAULT_HALF_LIFE_S) -> None:
        if half_life_s <= 0:
            raise ValueError("half_life_s must be positive")
        self.half_life_s = half_life_s
        self.tau = half_life_s / math.log(2)
        self._sorted: dict[str, tuple[Sequence[PendingJob], list[PendingJob]]] = {}

    def share(self, queue: str, snap: Snapshot, usage: QueueUsage) -> float:
        weight = usage.spec(queue).weight
        past = snap.usage.get(queue, 0.0) / self.tau
        return (usage.dominant_share(queue) + past) / weight

    def order(
        self, pending: Sequence[PendingJob], snap: Snapshot, usage: QueueUsage
    ) -> Iterator[PendingJob]:
        queues: dict[str, Sequence[PendingJob]] = {}  # each by (-priority, submit_time, seq)
        index = snap.pending_index
        if index is not None and pending is snap.pending:
            # each queue's jobs are apart and in arrival order already
            for q, arrived in index.by_queue.items():
                queues[q] = arrived if index.one_priority else self._by_priority(q, arrived)
        else:
            by_queue: dict[str, list[PendingJob]] = {}
            for p in pending:
                by_queue.setdefault(p.spec.queue, []).append(p)
            for jobs in by_queue.values():
                # two stable sorts with C-level keys
                jobs.sort(key=_ARRIVAL)
                jobs.sort(key=_PRIORITY, reverse=True)
            queues.update(by_queue)
        heap = [(self.share(q, snap, usage), q) for q in queues]
        # A queue's share changes only when its usage does, and QueueUsage replaces a queue's
        # (immutable) Resources when it changes: recompute the share only then.
        seen = {q: usage.used.get(q) for q in queues}
        last = {q: sh for sh, q in heap}
        taken = dict.fromkeys(queues, 0)
        heapq.heapify(heap)
        while heap:
            _, q = heapq.heappop(heap)
            line = queues[q]
            n = taken[q]
            while True:
                yield line[n]
                n += 1
                if n >= len(line):
                    break
                now = usage.used.get(q)
                if now is not seen[q]:
                    seen[q] = now
                    last[q] = self.share(q, snap, usage)
                    heapq.heappush(heap, (last[q], q))
                    break
                # its share is what it was when it came off the heap, the least of all (no
                # other share changes meanwhile): it would come straight back, so go on
            taken[q] = n

    def _by_priority(self, queue: str, arrived: Sequence[PendingJob]) -> list[PendingJob]:
        """``arrived`` (in arrival order) by (-priority, arrival); remembered for as long as the
        queue's sequence is the same object (the core makes a new one on a change)."""
        seen = self._sorted.get(queue)
        if seen is not None and seen[0] is arrived:
            return seen[1]
        jobs = sorted(arrived, key=_PRIORITY, reverse=True)
        self._sorted[queue] = (arrived, jobs)
        return jobs

    def outranks(self, job: PendingJob, victim: RunningJob, snap: Snapshot) -> bool:
        return False
