"""What ``order/las``'s ``outranked`` reads of each running job that does not change while it
runs, worked out once per job instead of once per snapshot (a full cluster asks per level, per
preemptor, over every running job).

Each entry: the job, whether it is kept running to its end (aged), its start, its service
before this attempt since its last promotion, its GPUs (milli), ``saved_since``, and whether
``spared`` applies to it at all (``unsaved_once``, earlier service, no notice).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.scheduler.snapshot import RunningJob

Terms = tuple[RunningJob, bool, float, float, int, float, bool]


class RunningTerms:
    """The entries by job identity (an entry holds its job, so no other object has that
    ``id`` while it is kept), and the list of them for the running jobs last asked of (the core
    keeps one tuple until a job starts or stops)."""

    def __init__(self, unsaved_once: bool) -> None:
        self.unsaved_once = unsaved_once
        self._by_id: dict[int, Terms] = {}
        self._terms: list[Terms] = []
        self._for: Sequence[RunningJob] | None = None

    def of(self, running: Sequence[RunningJob]) -> list[Terms]:
        """Each running job's entry, in order."""
        if self._for is running and isinstance(running, tuple):
            return self._terms
        by_id = self._by_id
        known, new = by_id.get, self._new
        terms = [known(id(r)) or new(r) for r in running]
        if len(by_id) > 2 * len(running) + 1000:  # forget the jobs that stopped
            self._by_id = {id(f[0]): f for f in terms}
        self._terms, self._for = terms, running
        return terms

    def _new(self, r: RunningJob) -> Terms:
        unsaved = self.unsaved_once and r.attained_gpu_s > 0 and r.spec.preempt_notice is None
        service = r.attained_gpu_s - r.mark.base_gpu_s
        milli = r.spec.total_gpu_milli
        f = self._by_id[id(r)] = (
            r,
            r.mark.aged,
            r.start_time,
            service,
            milli,
            r.saved_since,
            unsaved,
        )
        return f
