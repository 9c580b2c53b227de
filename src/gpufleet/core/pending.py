"""The controller's pending jobs, with the ``PendingIndex`` a cycle reads instead of scanning
them all: each queue's jobs apart, and counts of the jobs that are not plain (waiting, wanting
fractional GPUs, nominated). Every change costs O(1); a snapshot re-makes only the tuples of
the queues that changed."""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model.resources import MILLI
from gpufleet.scheduler.snapshot import PendingIndex, PendingJob


def _arrival(p: PendingJob) -> tuple[float, int]:
    return (p.submit_time, p.seq)


class PendingBook:
    def __init__(self) -> None:
        self._jobs: dict[str, PendingJob] = {}
        self._queues: dict[str, dict[str, PendingJob]] = {}
        self._unsorted: set[str | None] = set()  # queues (None: all jobs) out of arrival order
        self._tuple: tuple[PendingJob, ...] | None = None
        self._queue_tuples: dict[str, tuple[PendingJob, ...]] = {}
        self._index: PendingIndex | None = None
        self._not_ready = 0
        self._fractional = 0
        self._nominated = 0
        self._priorities: dict[int, int] = {}  # priority → how many jobs have it

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def put(self, p: PendingJob) -> None:
        """Add ``p``, or replace the view of the same job (in its place)."""
        old = self._jobs.get(p.id)
        if old is not None and (old.spec.queue != p.spec.queue or _arrival(old) != _arrival(p)):
            self.remove(p.id)  # not the same place any more: put it anew
            old = None
        if old is None:
            self._note_order(None, self._jobs, p)
            self._note_order(p.spec.queue, self._queues.get(p.spec.queue), p)
        else:
            self._count(old, -1)
        self._jobs[p.id] = p
        self._queues.setdefault(p.spec.queue, {})[p.id] = p
        self._count(p, 1)
        self._changed(p.spec.queue)

    def remove(self, job_id: str) -> bool:
        old = self._jobs.pop(job_id, None)
        if old is None:
            return False
        self._count(old, -1)
        self._drop(old)
        self._changed(old.spec.queue)
        return True

    def jobs(self) -> tuple[PendingJob, ...]:
        """Every pending job, sorted by (submit_time, seq)."""
        if self._tuple is None:
            if None in self._unsorted:
                self._jobs = {p.id: p for p in sorted(self._jobs.values(), key=_arrival)}
                self._unsorted.discard(None)
            self._tuple = tuple(self._jobs.values())
        return self._tuple

    def index(self) -> PendingIndex:
        if self._index is None:
            by_queue: dict[str, tuple[PendingJob, ...]] = {}
            for q, jobs in self._queues.items():
                t = self._queue_tuples.get(q)
                if t is None:
                    if q in self._unsorted:
                        jobs = {p.id: p for p in sorted(jobs.values(), key=_arrival)}
                        self._queues[q] = jobs
                        self._unsorted.discard(q)
                    t = self._queue_tuples[q] = tuple(jobs.values())
                by_queue[q] = t
            self._index = PendingIndex(
                by_queue,
                self._not_ready == 0,
                self._fractional == 0,
                self._nominated,
                len(self._priorities) <= 1,
            )
        return self._index

    def _note_order(
        self, key: str | None, jobs: dict[str, PendingJob] | None, p: PendingJob
    ) -> None:
        """Mark ``jobs`` unsorted if ``p``, put last, does not come after the last one."""
        if jobs:
            last = next(reversed(jobs.values()))
            if _arrival(last) > _arrival(p):
                self._unsorted.add(key)

    def _drop(self, p: PendingJob) -> None:
        q = p.spec.queue
        jobs = self._queues[q]
        del jobs[p.id]
        if not jobs:
            del self._queues[q]
            self._unsorted.discard(q)

    def _changed(self, queue: str) -> None:
        self._tuple = None
        self._index = None
        self._queue_tuples.pop(queue, None)

    def _count(self, p: PendingJob, n: int) -> None:
        s = p.spec
        if p.waiting_for or p.eligible_time > 0:
            self._not_ready += n
        if not (s.gpus_per_worker > 0 and s.gpu_milli >= MILLI):
            self._fractional += n
        if p.nominated:
            self._nominated += n
        left = self._priorities.get(s.priority, 0) + n
        if left:
            self._priorities[s.priority] = left
        else:
            del self._priorities[s.priority]
