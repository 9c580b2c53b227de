"""The pending jobs as ``/metrics`` counts them: per queue and Reason code, and how long each
queue's oldest has waited.

Kept up to date by each commit's transitions (``on_commit``) rather than worked out from a
snapshot per scrape: a scrape reads the per-queue figures in O(queues). The Reason codes come
from the last scheduling cycle, so they are read again once per cycle (O(pending), only when a
cycle ran since the last scrape). A tally that lost count of the core's pending jobs (a
controller restored from its store, a collector installed late) is rebuilt from them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gpufleet.model.job import JobState
from gpufleet.scheduler.decisions import Reasons
from gpufleet.scheduler.snapshot import PendingJob

UNSCHEDULED = "Unscheduled"  # pending, and no cycle has given it a Reason yet


class PendingTally:
    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        # queue → job id → waiting since (submission or last requeue), oldest first
        self._since: dict[str, dict[str, float]] = {}
        self._unsorted: set[str] = set()  # queues whose ``_since`` lost its order
        self._queue_of: dict[str, str] = {}
        self._code_of: dict[str, str] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._reasons: Reasons | None = None  # the cycle's Reasons the codes were read from

    def __len__(self) -> int:
        return len(self._queue_of)

    # ----- fed by the commits ------------------------------------------------------------------

    def add(self, job_id: str, queue: str, since: float) -> None:
        self.remove(job_id)
        jobs = self._since.setdefault(queue, {})
        if jobs and since < next(reversed(jobs.values())):
            self._unsorted.add(queue)
        jobs[job_id] = since
        self._queue_of[job_id] = queue
        self._count(job_id, queue, self._code(job_id))

    def remove(self, job_id: str) -> None:
        queue = self._queue_of.pop(job_id, None)
        if queue is None:
            return
        del self._since[queue][job_id]
        if not self._since[queue]:
            del self._since[queue]
            self._unsorted.discard(queue)
        key = (queue, self._code_of.pop(job_id))
        self._counts[key] -= 1
        if not self._counts[key]:
            del self._counts[key]

    def rebuild(self, pending: Iterable[PendingJob], since: Callable[[PendingJob], float]) -> None:
        self._clear()
        for p in sorted(pending, key=since):
            self.add(p.id, p.spec.queue, since(p))

    # ----- read at scrape time -----------------------------------------------------------------

    def refresh(self, reasons: Reasons | None) -> None:
        """Read every job's code again when a cycle has run since the last read."""
        if reasons is self._reasons:
            return
        self._reasons = reasons
        self._counts.clear()
        for job_id, queue in self._queue_of.items():
            self._count(job_id, queue, self._code(job_id))

    def counts(self) -> Mapping[tuple[str, str], int]:
        """(queue, Reason code) → pending jobs."""
        return self._counts

    def oldest_since(self) -> dict[str, float]:
        """Queue → when its longest-waiting pending job began to wait."""
        for q in self._unsorted:
            self._since[q] = dict(sorted(self._since[q].items(), key=lambda kv: kv[1]))
        self._unsorted.clear()
        return {q: next(iter(jobs.values())) for q, jobs in self._since.items()}

    def _code(self, job_id: str) -> str:
        # raw: the code only; the estimated start a Reason read gets would plan the whole queue
        r = self._reasons.raw(job_id) if self._reasons is not None else None
        return r.code.value if r is not None else UNSCHEDULED

    def _count(self, job_id: str, queue: str, code: str) -> None:
        self._code_of[job_id] = code
        self._counts[(queue, code)] = self._counts.get((queue, code), 0) + 1


def waiting_since(
    submit_time: float, attempt: int, history: list[tuple[float, JobState, str]]
) -> float:
    """A requeued job waits since its requeue, a new one since its submission."""
    if attempt and history and history[-1][1] is JobState.PENDING:
        return history[-1][0]
    return submit_time
