"""When each pending job should start: a plan of the queue played forward from the cycle.

Pure. Every running job (and every job the cycle started) holds its GPUs for its predicted run
time (the median the cluster's own history gives, ``runtime_history``, bounded by its limit;
without a history, until its time limit, or the backfill plugin's assumed one, or for ever); the
EASY reservation's job starts at its reservation; then the other pending jobs are played forward
as the scheduler would take them (``estimate_forward``): at each predicted end, in the order
plugin's order on the usage of that moment, EASY-style, each where its queue's quota admits it.
Counted in GPUs over the cluster, and per node for a job of several GPUs per worker
(``estimate_nodes``: its start and its shadow wait for enough nodes each with room for a
worker, and the nodes it will take are kept from jobs that would run past its start; the
running jobs are held where they run, the planned ones best fit). By default
(``plan_later_of_two``) the queue is played both ways, over the cluster and with only the big
jobs per node, and a job is told the later of its two starts (ADR 0070). With ``plan_arrivals`` the
jobs of the last hours (``arrivals``) come again after the cycle and take their turn (a
forecast of what other queues will submit; they are not planned). What the user is told comes
with an 80 % band, from how far such estimates were off on this cluster (``start_errors``).

Built lazily: nothing is worked out until a Reason is read (the simulator never reads them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import chain
from typing import TYPE_CHECKING

from gpufleet.model.allocation import Allocation
from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import Resources
from gpufleet.scheduler.admission import admit_any
from gpufleet.scheduler.estimate_forward import Forward
from gpufleet.scheduler.estimate_nodes import node_checked, room_of, takes_of
from gpufleet.scheduler.runtime_history import RuntimeQuantiles
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
FORECAST_S = 7 * 86400.0  # how far the forecast arrivals go (Profile.plan_arrivals)
# no planned start: never, or one the Reason gives itself (a reservation's end or start)
_NO_START = {
    ReasonCode.NEVER,
    ReasonCode.DEPENDENCY,
    ReasonCode.DEP_NEVER,
    ReasonCode.HELD_USER,
    ReasonCode.HELD_ADMIN,
    ReasonCode.ARRAY_LIMIT,
    ReasonCode.RESV_MAINT,
    ReasonCode.RESV_NODES,
    ReasonCode.RESV_WAIT,
    ReasonCode.GROWING,  # when its nodes register: the provider's time, not the plan's
}
INF = math.inf


@dataclass(frozen=True, slots=True)
class Estimate:
    at: float
    bound: str


class StartPlan:
    """The estimated starts of one cycle's pending jobs, worked out on first use."""

    def __init__(self, snap: Snapshot, profile: Profile, res: CycleResult) -> None:
        self.snap, self.profile, self.res = snap, profile, res
        self._plan: dict[str, Estimate] | None = None
        self._limited = QueueUsage.of(snap).limited
        self._ask_all = not profile.admit.admits_unlimited
        self._cap = snap.capacity or capacity_of(snap.nodes)
        self._queue_of: dict[str, str] | None = None
        self._runtimes: dict[tuple[int, float], RuntimeQuantiles | None] = {}

    def shown(self, job_id: str, r: Reason, e: Estimate) -> Reason:
        """``r`` with ``e``, the plan's estimate, as its user is told it: with its 80 % band,
        from how far such estimates were off on this cluster (``start_errors``), where the
        history has enough of them; the first one told is remembered to learn from."""
        errs = self.snap.start_errors
        if errs is None:
            return replace(r, estimated_start=e.at, start_bound=e.bound)
        if self._queue_of is None:
            self._queue_of = {p.id: p.spec.queue for p in self.snap.pending}
        queue = self._queue_of.get(job_id, "")
        now = self.snap.now
        b = errs.band(now, e.at, queue, e.bound)
        errs.told(job_id, now, e.at, queue, e.bound, b)  # with its band: how it came out steers
        if b is None:
            return replace(r, estimated_start=e.at, start_bound=e.bound)
        return replace(
            r,
            estimated_start=e.at,
            start_bound=e.bound,
            start_low=min(b.low, e.at),
            start_high=max(b.high, e.at),
        )

    def get(self, job_id: str) -> Estimate | None:
        if self._plan is None:
            self._plan = self._work_out()
        return self._plan.get(job_id)

    def _work_out(self) -> dict[str, Estimate]:
        snap, res = self.snap, self.res
        now = snap.now
        assumed = self.profile.backfill.assume_limit_s
        cap = self._cap.gpu_milli
        holds: list[tuple[float, float, str, Resources]] = []  # (start, end, queue, resources)
        where: list[Allocation] = []  # each hold's allocation, in step with ``holds``
        stopping = {p.job_id for p in res.preemptions}
        for r in snap.running:
            if r.id in stopping or r.stopping_since is not None:
                end = now
            else:
                end = self._end_of(r.spec, r.start_time, assumed, now - r.start_time)
            holds.append((-INF, end, r.spec.queue, r.spec.total_resources))
            where.append(r.allocation)
        by_id = {p.id: p for p in snap.pending}
        for s in res.starts:
            spec = by_id[s.job_id].spec
            queue = s.queue or spec.queue  # a job of several queues: the one it started in
            holds.append((now, self._end_of(spec, now, assumed), queue, spec.total_resources))
            where.append(s.allocation)

        plan: dict[str, Estimate] = {}
        reservation = res.reservation
        if reservation is not None and reservation.job_id in by_id:
            spec = by_id[reservation.job_id].spec
            t = reservation.start_time
            end = self._end_of(spec, t, assumed)
            holds.append((t, end, spec.queue, spec.total_resources))
            where.append(reservation.allocation)
            plan[reservation.job_id] = Estimate(t, RESERVED)
        reasons: Reasons = res.reasons
        started = {s.job_id for s in res.starts}
        jobs = []
        for job in self._in_order(by_id):
            if job.id in plan or job.id in started:
                continue
            why = reasons.raw(job.id)
            if why is None or why.code in _NO_START:
                continue
            if job.spec.total_resources.gpu_milli > cap:
                continue
            jobs.append(job)
        prof = self.profile
        if prof.plan_per_node or prof.plan_big_per_node:
            modes = [(True, not prof.plan_per_node)]
        elif prof.plan_later_of_two and (prof.plan_arrivals or any(_big(j) for j in jobs)):
            modes = [(False, False), (True, True)]  # (with no big job the two are one plan)
        else:
            modes = [(False, False)]
        for per_node, big_only in modes:
            played = self._play(holds, where, jobs, per_node, big_only)
            for job_id, at in played.items():
                e = plan.get(job_id)
                if e is None or at > e.at:  # of two plans, the later start
                    plan[job_id] = Estimate(at, PLANNED)
        return plan

    def _play(
        self,
        fixed: list[tuple[float, float, str, Resources]],
        where: list[Allocation],
        jobs: list[PendingJob],
        per_node: bool,
        big_only: bool,
    ) -> dict[str, float]:
        """The pending ``jobs`` played forward after what holds GPUs (``fixed``, each held
        where ``where`` says): over the cluster, or per node (``per_node``; ``big_only``: only
        the jobs of several whole GPUs a worker placed there)."""
        snap = self.snap
        assumed = self.profile.backfill.assume_limit_s
        holds = list(fixed)  # the plan's starts are added as it goes, for the quotas
        usage = self._usage_after_starts()
        shares = getattr(self.profile.order, "share", None)

        def end_of(job: PendingJob, t: float) -> float:
            return self._end_of(job.spec, t, assumed)

        def admits(job: PendingJob, t: float) -> str | None:
            spec = job.spec
            if not spec.queues and spec.queue not in self._limited:
                return spec.queue
            return self._admitted_at(job, t, holds)

        def on_start(job: PendingJob, t: float, end: float, queue: str) -> None:
            holds.append((t, end, queue, job.spec.total_resources))

        nodes, index = room_of(snap.nodes) if per_node else (None, {})
        fwd = Forward(
            snap,
            usage,
            self.profile.order if shares is not None else None,  # type: ignore[arg-type]
            self._cap.gpu_milli,
            end_of,
            admits,
            on_start,
            nodes,
            big_only=big_only,
        )
        for (start, end, queue, need), alloc in zip(fixed, where, strict=True):
            fwd.hold(start, end, queue, need, takes_of(alloc, index))
        return fwd.play(jobs, MAX_PLANNED, self._to_come())

    def _to_come(self) -> Iterator[PendingJob] | None:
        """The jobs forecast to arrive (``Profile.plan_arrivals``): those submitted in the last
        window (``arrivals``), again at the same offsets in each window after the cycle, for
        ``FORECAST_S`` at most; each eligible from its arrival. None: nothing forecast."""
        arrivals = self.snap.arrivals
        if not self.profile.plan_arrivals or arrivals is None:
            return None
        now, cap = self.snap.now, self._cap.gpu_milli
        window = [(t, s) for t, s in arrivals.recent(now) if s.total_gpu_milli <= cap]
        if not window:
            return None
        w = arrivals.window_s

        def jobs() -> Iterator[PendingJob]:
            for k in range(1, max(1, int(FORECAST_S // w)) + 1):
                for i, (t, spec) in enumerate(window):
                    at = t + k * w
                    yield PendingJob(f"~{k}.{i}", spec, at, eligible_time=at)

        return jobs()

    def _end_of(
        self, spec: JobSpec, start: float, assumed: float | None, ran: float = 0.0
    ) -> float:
        """When a job started (or to start) at ``start`` should end: its predicted run time's
        median from the cluster's history (knowing it has run ``ran`` s), else its time limit
        (else the backfill plugin's assumed one; else never)."""
        hist = self.snap.history
        if hist is not None:
            key = (id(spec), ran)
            q = self._runtimes.get(key)
            if q is None:
                q = self._runtimes[key] = hist.predict(spec, ran)
            if q is not None:
                return start + q.mid
        return _end(start, spec.time_limit_s, assumed)

    def _in_order(self, by_id: dict[str, PendingJob]) -> Iterable[PendingJob]:
        """The jobs still pending, nominated first, then in the order plugin's order on the
        usage the cycle leaves. (Adding each planned job to that usage, so that fair share
        takes turns between queues as the plan fills, was worse on the Philly trace: mean
        |error| 1.24 h, p90 4.62 h over its first 6,000 jobs, against 1.10 h and 2.76 h.)"""
        started = {s.job_id for s in self.res.starts}
        left = [p for p in by_id.values() if p.id not in started]
        usage = self._usage_after_starts()
        nominated = [p for p in left if p.nominated]
        rest = (p for p in self.profile.order.order(left, self.snap, usage) if not p.nominated)
        return chain(nominated, rest)

    def _usage_after_starts(self) -> QueueUsage:
        """Each queue's usage as the cycle leaves it: the snapshot's and the cycle's starts (a
        job of several queues in the one it started in). A new object each time: a plan adds
        its own starts to it."""
        usage = QueueUsage.of(self.snap)
        specs = {p.id: p.spec for p in self.snap.pending} if self.res.starts else {}
        for s in self.res.starts:
            spec = specs[s.job_id]
            usage.add(s.queue or spec.queue, spec.total_resources)
        return usage

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


def _big(job: PendingJob) -> bool:
    """Whether the plan with the big jobs per node places ``job`` on nodes."""
    return node_checked(job.spec.gpus_per_worker, job.spec.gpu_milli)


def _end(start: float, limit: float | None, assumed: float | None) -> float:
    if limit is not None:
        return start + limit
    return INF if assumed is None else start + assumed
