"""When each pending job should start: a plan of the queue on the cycle's end state.

Pure. Every running job (and every job the cycle started) holds its GPUs until its time limit
(or the backfill plugin's assumed one; without either, for ever); the EASY reservation's job
starts at its reservation; then the other pending jobs, in the order the cycle uses, each take
the first moment at which enough GPUs are free for its whole time limit and its queue's quota
admits it (the admit plugin is asked, with the queues' usage at that moment), as conservative
backfill would plan them. Counted in GPUs over the cluster, not per node: fragmentation can
delay a start beyond its estimate, jobs that end before their limit bring it forward.

Built lazily: nothing is worked out until a Reason is read (the simulator never reads them).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

from gpufleet.model.reason import ReasonCode
from gpufleet.model.resources import Resources
from gpufleet.scheduler.admission import admit_any
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage, capacity_of

if TYPE_CHECKING:
    from gpufleet.scheduler.decisions import CycleResult, Reasons
    from gpufleet.scheduler.framework import Profile

# How sure an estimate is (Reason.start_bound)
RESERVED = "reserved"  # EASY's reservation: at the latest, unless nodes fail or a job
#                        of higher priority arrives (backfilled jobs never delay it)
PLANNED = "planned"  # if every job runs to its time limit and none of higher priority arrives

MAX_PLANNED = 2000  # jobs planned per cycle, in order; those behind get no estimate
_NO_START = {ReasonCode.NEVER, ReasonCode.DEPENDENCY, ReasonCode.ARRAY_LIMIT}
INF = math.inf


@dataclass(frozen=True, slots=True)
class Estimate:
    at: float
    bound: str


class _Profile:
    """GPUs in use over time: ``used[i]`` from ``times[i]`` until ``times[i + 1]``."""

    def __init__(self, start: float) -> None:
        self.times: list[float] = [start]
        self.used: list[int] = [0]

    def _split(self, t: float) -> int:
        i = bisect.bisect_right(self.times, t) - 1
        if self.times[i] != t:
            self.times.insert(i + 1, t)
            self.used.insert(i + 1, self.used[i])
            i += 1
        return i

    def hold(self, start: float, end: float, gpu_milli: int) -> None:
        if gpu_milli == 0 or end <= start:
            return
        i = self._split(max(start, self.times[0]))
        j = len(self.times) if end == INF else self._split(end)
        for k in range(i, j):
            self.used[k] += gpu_milli


class StartPlan:
    """The estimated starts of one cycle's pending jobs, worked out on first use."""

    def __init__(self, snap: Snapshot, profile: Profile, res: CycleResult) -> None:
        self.snap, self.profile, self.res = snap, profile, res
        self._plan: dict[str, Estimate] | None = None
        self._limited = QueueUsage.of(snap).limited
        self._ask_all = not profile.admit.admits_unlimited
        self._cap = snap.capacity or capacity_of(snap.nodes)

    def get(self, job_id: str) -> Estimate | None:
        if self._plan is None:
            self._plan = self._work_out()
        return self._plan.get(job_id)

    def _work_out(self) -> dict[str, Estimate]:
        snap, res = self.snap, self.res
        now = snap.now
        assumed = self.profile.backfill.assume_limit_s
        cap = self._cap.gpu_milli
        gpus = _Profile(now)
        holds: list[tuple[float, float, str, Resources]] = []  # (start, end, queue, resources)
        stopping = {p.job_id for p in res.preemptions}
        for r in snap.running:
            if r.id in stopping or r.stopping_since is not None:
                end = now
            else:
                end = _end(r.start_time, r.spec.time_limit_s, assumed)
            holds.append((-INF, end, r.spec.queue, r.spec.total_resources))
        by_id = {p.id: p for p in snap.pending}
        for s in res.starts:
            spec = by_id[s.job_id].spec
            queue = s.queue or spec.queue  # a job of several queues: the one it started in
            holds.append((now, _end(now, spec.time_limit_s, assumed), queue, spec.total_resources))
        for _, end, _, need in holds:
            gpus.hold(now, end, need.gpu_milli)

        plan: dict[str, Estimate] = {}
        reservation = res.reservation
        if reservation is not None and reservation.job_id in by_id:
            spec = by_id[reservation.job_id].spec
            t = reservation.start_time
            end = _end(t, spec.time_limit_s, assumed)
            gpus.hold(t, end, spec.total_resources.gpu_milli)
            holds.append((t, end, spec.queue, spec.total_resources))
            plan[reservation.job_id] = Estimate(t, RESERVED)
        reasons: Reasons = res.reasons
        for n, job in enumerate(self._in_order(by_id)):
            if n >= MAX_PLANNED:
                break
            if job.id in plan:
                continue
            why = reasons.raw(job.id)
            if why is None or why.code in _NO_START:
                continue
            found = self._first_start(job, max(now, job.eligible_time), gpus, holds, cap, assumed)
            if found is None:
                continue
            at, queue = found
            spec = job.spec
            end = _end(at, spec.time_limit_s, assumed)
            gpus.hold(at, end, spec.total_resources.gpu_milli)
            holds.append((at, end, queue, spec.total_resources))
            plan[job.id] = Estimate(at, PLANNED)
        return plan

    def _in_order(self, by_id: dict[str, PendingJob]) -> Iterable[PendingJob]:
        """The jobs still pending, nominated first, then in the order plugin's order on the
        usage the cycle leaves. (Adding each planned job to that usage, so that fair share
        takes turns between queues as the plan fills, was worse on the Philly trace: mean
        |error| 1.24 h, p90 4.62 h over its first 6,000 jobs, against 1.10 h and 2.76 h.)"""
        started = {s.job_id for s in self.res.starts}
        left = [p for p in by_id.values() if p.id not in started]
        usage = QueueUsage.of(self.snap)
        for s in self.res.starts:
            spec = by_id[s.job_id].spec
            usage.add(s.queue or spec.queue, spec.total_resources)
        nominated = [p for p in left if p.nominated]
        rest = (p for p in self.profile.order.order(left, self.snap, usage) if not p.nominated)
        return chain(nominated, rest)

    def _first_start(
        self,
        job: PendingJob,
        earliest: float,
        gpus: _Profile,
        holds: list[tuple[float, float, str, Resources]],
        cap: int,
        assumed: float | None,
    ) -> tuple[float, str] | None:
        """The first moment from ``earliest`` with ``job``'s GPUs free for its whole limit,
        at which its queue's quota admits it (a job of several queues: any of them), and the
        queue it would start in: one pass over the profile's steps."""
        spec = job.spec
        need = spec.total_resources.gpu_milli
        if need > cap:
            return None
        queue = spec.queue
        if spec.queues:
            limited = all(q in self._limited for q in spec.queues)
            if not limited:  # the first unlimited one admits it whenever it fits
                queue = next(q for q in spec.queues if q not in self._limited)
        else:
            limited = queue in self._limited
        times, used = gpus.times, gpus.used
        k = max(0, bisect.bisect_right(times, earliest) - 1)
        start: float | None = None  # the candidate, while every step since it has room
        while k < len(times):
            if used[k] + need > cap:
                start = None
            else:
                if start is None:
                    start = max(times[k], earliest)
                    if limited:
                        admitted = self._admitted_at(job, start, holds)
                        if admitted is None:
                            start = None
                            k += 1
                            continue
                        queue = admitted
                nxt = times[k + 1] if k + 1 < len(times) else INF
                if nxt >= _end(start, spec.time_limit_s, assumed):
                    return (start, queue) if start != INF else None
            k += 1
        return None

    def _admitted_at(
        self, job: PendingJob, t: float, holds: list[tuple[float, float, str, Resources]]
    ) -> str | None:
        """The queue that admits ``job`` at ``t`` (of several, the one admission chooses), or
        None."""
        used: dict[str, Resources] = {}
        for start, end, queue, res in holds:
            if start <= t < end:
                used[queue] = used.get(queue, Resources()) + res
        usage = QueueUsage(self.snap.queues, (), self._cap, used)
        as_q, adm = admit_any(job, self.profile.admit, usage, self._ask_all)
        return as_q.spec.queue if adm.status.ok else None


def _end(start: float, limit: float | None, assumed: float | None) -> float:
    if limit is not None:
        return start + limit
    return INF if assumed is None else start + assumed
