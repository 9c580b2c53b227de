"""Slurm's array throttle (``--array=0-15%4``): at most N tasks of an array run at once.

The first N − running pending tasks of an array, in submission order, may be scheduled; the
rest wait with a Reason. A cycle therefore starts at most as many tasks as the limit leaves, and
each start or end moves the window: the methods answer which tasks changed sides, so the
controller refreshes only their pending views. Pure bookkeeping: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field


@dataclass
class _Array:
    limit: int
    active: set[str] = field(default_factory=set)  # STARTING or RUNNING
    pending: list[tuple[int, str]] = field(default_factory=list)  # (seq, job id), sorted
    allowed: set[str] = field(default_factory=set)  # the pending tasks that may start


class ArrayThrottle:
    def __init__(self) -> None:
        self._arrays: dict[str, _Array] = {}
        self._of: dict[str, str] = {}  # job id → array id, for tracked tasks

    def queued(self, array_id: str, limit: int, job_id: str, seq: int) -> set[str]:
        a = self._arrays.setdefault(array_id, _Array(limit))
        self._of[job_id] = array_id
        i = bisect_left(a.pending, (seq, job_id))
        if i == len(a.pending) or a.pending[i] != (seq, job_id):
            a.pending.insert(i, (seq, job_id))
        return self._refresh(a)

    def unqueued(self, job_id: str, seq: int) -> set[str]:
        a = self._array(job_id)
        if a is None:
            return set()
        i = bisect_left(a.pending, (seq, job_id))
        if i < len(a.pending) and a.pending[i] == (seq, job_id):
            del a.pending[i]
        a.allowed.discard(job_id)
        changed = self._refresh(a)
        self._forget(job_id, a)
        return changed

    def started(self, array_id: str, limit: int, job_id: str) -> set[str]:
        a = self._arrays.setdefault(array_id, _Array(limit))
        self._of[job_id] = array_id
        a.active.add(job_id)
        return self._refresh(a)

    def stopped(self, job_id: str) -> set[str]:
        a = self._array(job_id)
        if a is None:
            return set()
        a.active.discard(job_id)
        changed = self._refresh(a)
        self._forget(job_id, a)
        return changed

    def waiting(self, job_id: str) -> str:
        """Why a pending task may not start now ("" if it may)."""
        a = self._array(job_id)
        if a is None or job_id in a.allowed:
            return ""
        # outside the window only when running + allowed fill the limit
        return (
            f"array {self._of[job_id]} runs at most {a.limit} of its tasks at once "
            f"(%{a.limit}); this one starts when one of those ends"
        )

    def _array(self, job_id: str) -> _Array | None:
        array_id = self._of.get(job_id)
        return None if array_id is None else self._arrays.get(array_id)

    def _refresh(self, a: _Array) -> set[str]:
        free = max(0, a.limit - len(a.active))
        allowed = {job_id for _, job_id in a.pending[:free]}
        changed = allowed ^ a.allowed
        a.allowed = allowed
        return changed

    def _forget(self, job_id: str, a: _Array) -> None:
        """Drop a task just taken out of the queue or stopped: it is neither pending nor
        running now (a requeue tracks it again); an array with no task left goes too."""
        array_id = self._of.pop(job_id)
        if not a.active and not a.pending:
            del self._arrays[array_id]
