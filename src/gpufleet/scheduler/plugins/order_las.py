"""Tiresias' discretized two-dimensional least-attained-service (2D-LAS).

Service is GPUs × time received so far, with no knowledge of durations. Jobs fall into queues
by thresholds on that service; lower queues go first, FIFO inside a queue. A job that waited
longer than ``starvation_factor`` times the time it has run is promoted to the first queue
(Tiresias' starvation guard; 0 turns it off). With ``preempt: [las]`` a job in a lower queue
preempts running jobs that have crossed into a higher one.
"""

from __future__ import annotations

import bisect
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import chain

from gpufleet.scheduler.plugins.base import OrderBase
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "order/las"


class Plugin(OrderBase):
    def __init__(
        self, thresholds_gpu_s: Sequence[float] = (3200.0,), starvation_factor: float = 0.0
    ) -> None:
        th = [float(t) for t in thresholds_gpu_s]
        if th != sorted(th) or any(t <= 0 for t in th):
            raise ValueError("thresholds_gpu_s must be positive and increasing")
        self.thresholds = th
        self.starvation_factor = starvation_factor

    def level_of(self, attained_gpu_s: float) -> int:
        return bisect.bisect_right(self.thresholds, attained_gpu_s)

    def pending_level(self, p: PendingJob, now: float) -> int:
        level = self.level_of(p.attained_gpu_s)
        if level and self.starvation_factor > 0:
            gpus = max(1, p.spec.workers * p.spec.gpus_per_worker)
            ran = p.attained_gpu_s / gpus
            if now - p.submit_time - ran > self.starvation_factor * ran:
                return 0
        return level

    def order(
        self, pending: Sequence[PendingJob], snap: Snapshot, usage: QueueUsage
    ) -> Iterator[PendingJob]:
        now = snap.now
        if pending is snap.pending and snap.pending_index is not None:
            return self._by_level(pending, now)
        if self.starvation_factor <= 0:  # the level is the attained service's alone
            th = self.thresholds
            return iter(
                sorted(
                    pending,
                    key=lambda p: (bisect_right(th, p.attained_gpu_s), p.submit_time, p.seq),
                )
            )
        return iter(
            sorted(pending, key=lambda p: (self.pending_level(p, now), p.submit_time, p.seq))
        )

    def _by_level(self, pending: Sequence[PendingJob], now: float) -> Iterator[PendingJob]:
        """``order`` for jobs already by ``(submit_time, seq)`` (a snapshot's pending jobs with
        its index): a stable split by level is that sort, without its key per job; the higher
        levels are split only when the walk gets to them (a full cluster ends it sooner)."""
        th = self.thresholds
        if self.starvation_factor <= 0 and len(th) == 1:
            t = th[0]  # level 0 exactly below it (``bisect_right``)
            low = [p for p in pending if p.attained_gpu_s < t]
            return chain(low, (p for p in pending if not p.attained_gpu_s < t))
        levels: list[list[PendingJob]] = [[] for _ in range(len(th) + 1)]
        for p in pending:
            levels[self.pending_level(p, now)].append(p)
        return chain.from_iterable(levels)

    def outranks(self, job: PendingJob, victim: RunningJob, snap: Snapshot) -> bool:
        return self.pending_level(job, snap.now) < self.level_of(victim.attained(snap.now))

    def outrank_key(self, job: PendingJob, snap: Snapshot) -> int:
        """In one snapshot, ``outranks(job, v, snap)`` depends on ``job`` only through this."""
        if self.starvation_factor <= 0:  # asked per job a full cluster sends to step 5
            return bisect_right(self.thresholds, job.attained_gpu_s)
        return self.pending_level(job, snap.now)

    def outranked(self, job: PendingJob, snap: Snapshot) -> list[RunningJob]:
        """The running jobs ``job`` outranks (in ``snap.running``'s order): those whose
        attained service reached the threshold above ``job``'s level (``level_of`` is a
        ``bisect_right``, so it exceeds the level exactly there)."""
        level = self.pending_level(job, snap.now)
        if level >= len(self.thresholds):
            return []
        t, now = self.thresholds[level], snap.now
        # r.attained(now), written out: the same sum, without two calls per running job
        return [
            r
            for r in snap.running
            if r.attained_gpu_s + (now - r.start_time) * r.spec.total_gpu_milli / 1000 >= t
        ]
