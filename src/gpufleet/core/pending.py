"""The controller's pending jobs, with the ``PendingIndex`` a cycle reads instead of scanning
them all: each queue's jobs apart, and counts of the jobs that are not plain (waiting, wanting
fractional GPUs, nominated). The jobs are kept in arrival order as they come and go (a bisect
and a list insert or delete, in C); a snapshot re-makes only the tuples of the queues that
changed."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from gpufleet.model.resources import MILLI
from gpufleet.scheduler.snapshot import PendingIndex, PendingJob


def _arrival(p: PendingJob) -> tuple[float, int]:
    return (p.submit_time, p.seq)


class _Sorted:
    """Jobs kept by arrival (``(submit_time, seq)``; equal keys in the order they came), with
    their keys side by side so that finding a place is a ``bisect`` with no Python key call: a
    job put back with its old arrival (a preempted one) goes where it belongs, not last, and
    nothing is ever sorted again."""

    __slots__ = ("jobs", "keys")

    def __init__(self) -> None:
        self.keys: list[tuple[float, int]] = []
        self.jobs: list[PendingJob] = []

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, p: PendingJob) -> None:
        key = _arrival(p)
        i = bisect_right(self.keys, key)  # after equals: as appended, then sorted stably
        self.keys.insert(i, key)
        self.jobs.insert(i, p)

    def _find(self, p: PendingJob) -> int:
        """Where the job of ``p``'s id and arrival is."""
        keys, jobs, job_id = self.keys, self.jobs, p.id
        i = bisect_left(keys, _arrival(p))
        while jobs[i].id != job_id:
            i += 1
        return i

    def replace(self, p: PendingJob) -> None:
        """``p`` in the place of its job's view of the same arrival."""
        self.jobs[self._find(p)] = p

    def remove(self, p: PendingJob) -> None:
        i = self._find(p)
        del self.keys[i]
        del self.jobs[i]


class PendingBook:
    def __init__(self) -> None:
        self._jobs: dict[str, PendingJob] = {}
        self._all = _Sorted()
        self._queues: dict[str, _Sorted] = {}
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
        q = p.spec.queue
        if old is None:
            self._all.add(p)
            queue = self._queues.get(q)
            if queue is None:
                queue = self._queues[q] = _Sorted()
            queue.add(p)
        else:
            self._count(old, -1)
            self._all.replace(p)
            self._queues[q].replace(p)
        self._jobs[p.id] = p
        self._count(p, 1)
        self._changed(q)

    def remove(self, job_id: str) -> bool:
        old = self._jobs.pop(job_id, None)
        if old is None:
            return False
        self._count(old, -1)
        self._all.remove(old)
        q = old.spec.queue
        queue = self._queues[q]
        queue.remove(old)
        if not queue:
            del self._queues[q]
        self._changed(q)
        return True

    def jobs(self) -> tuple[PendingJob, ...]:
        """Every pending job, sorted by (submit_time, seq)."""
        if self._tuple is None:
            self._tuple = tuple(self._all.jobs)
        return self._tuple

    def index(self) -> PendingIndex:
        if self._index is None:
            by_queue: dict[str, tuple[PendingJob, ...]] = {}
            for q, queue in self._queues.items():
                t = self._queue_tuples.get(q)
                if t is None:
                    t = self._queue_tuples[q] = tuple(queue.jobs)
                by_queue[q] = t
            self._index = PendingIndex(
                by_queue,
                self._not_ready == 0,
                self._fractional == 0,
                self._nominated,
                len(self._priorities) <= 1,
            )
        return self._index

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
