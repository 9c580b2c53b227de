"""Tiresias' discretized two-dimensional least-attained-service (2D-LAS, NSDI'19).

Service is GPUs × time received (GPU-seconds), with no knowledge of durations. Jobs fall into
queues by thresholds on that service; lower queues go first, FIFO inside a queue. With
``preempt: [order]`` a job in a lower queue preempts running jobs that have crossed into a
higher one. The defaults are Tiresias' own simulator's (SymbioticLab/Tiresias, ``jobs.py``:
three queues, limits 3,250 and 7,200 GPU-s).

Starvation (Tiresias' STARVELIMIT, its PROMOTEKNOB ``starvation_factor``): a job that has
waited, since it first ran, ``starvation_factor`` times as long as it ran (both counted from
its last promotion) goes back to the first queue, and its service counts from zero again
there (its mark's ``base_gpu_s``, which the ``started`` hook sets as it starts), so it is
demoted again only after another first queue's worth. 0 turns the promotion off.
``starvation_cap_s`` (0: none) caps that wait: a job that waited this long is promoted whatever
it ran. ``age_limit_s`` (0: off): a job this long in the system (since its submission) goes
ahead of every level and, once started, is kept running to its end (no job outranks it).
``aged_share`` (1: no cap) bounds that: the aged jobs go ahead, oldest first, only while they
and the aged jobs already running hold at most this share of the cluster's GPUs (the first
always goes when none runs); the others keep their level (an aged job that starts from there
is kept running too, and counts). ``aged_by``: which aged jobs go first, ``age`` (the oldest)
or, with ``within: history``, ``remaining`` (the least expected remaining service: the share
goes to the aged jobs it can bring to their end soonest). ``aged_slack`` (0: off; with ``within:
history``): a job is aged only once its age also reaches ``age_limit_s`` plus this many times
the run time the history expects it still needs (expected remaining service ÷ its GPUs): the
jobs expected to be longest age last, as a deadline that grows with the expected size would
have it. ``min_run_s`` (0: off; Slurm's PreemptExemptTime, Themis'
leases): a running job is not preempted before its current attempt has run this long.

``unsaved_once`` (on by default): a job that cannot save its state at a stop (it declared no
checkpoint notice, ``JobSpec.preempt_notice``) and has already been sent back once (it has
service from an earlier attempt, thrown away) is not preempted again once its new attempt holds
more work than the first queue's service (what a preemption would throw away): a young attempt
may still be bumped, at little loss, a grown one runs to its end. Tiresias presumes that a
preempted job resumes where it stopped; a job that restarts from zero loses its attempt at every
preemption, and on a full cluster LAS takes the same long job again and again, each time for a
new level-0 arrival (Philly's second half of November at 16 × 8: 1.84 × FIFO's mean JCT without
the rule, 0.41 × with it). A job with a notice keeps its work and is preempted as Tiresias would.

``exchange`` (0: off; with ``within: history``; ``order/las-history``'s default 3): a running
job that cannot save at a stop is preempted only where the history expects the exchange to gain
(``scheduler/las_exchange.py``): its expected remaining service over ``exchange`` above the
preemptor's expected need plus the work the stop throws away on the preemptor's GPUs.

``fifo_slack`` (0: off; with ``within: history``): an age limit per job, relative to what FIFO
would have given it, with no duration stated. When the order first sees a job pending it sets
its deadline: its submission plus ``fifo_slack`` × (the backlog ahead of it in cluster time —
the expected remaining service of the running jobs and of the pending jobs that came before it,
over the cluster's GPUs — plus the run time expected of it, its expected service over its
GPUs); the history's expectations. From its deadline (and ``age_limit_s``, a floor; plus
``aged_slack`` × the run time it is still expected to need) the job is aged, as above
(``aged_share``, ``aged_by``). ``fifo_floor_q`` (0: off): the span (deadline − submission, before
the slack) is at least this quantile of the last 1,000 jobs' spans, so that only the jobs FIFO
too would keep long age. A job no expectation exists for yet (a new cluster's first jobs) gets
its deadline once one does. The deadlines are kept in memory (a restarted controller sets them
anew). ``kept``: which aged jobs that start are kept running to their end, ``aged`` (every one)
or ``admitted`` (only those the share let ahead; one past its limit that starts from its own
level can be preempted as any other).

``within``: the order inside a queue. ``fifo`` (Tiresias'); ``history``: least expected
remaining service first, as the cluster's own finished jobs of the same queue and GPU count
predict it (``scheduler/service_history.py``; no duration is given by anyone), FIFO among equal
or unknown ones (a new cluster's first jobs). ``history_window``: finished jobs kept per group.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from itertools import chain

from gpufleet.model.job import JobSpec
from gpufleet.scheduler import las_exchange
from gpufleet.scheduler.las_terms import RunningTerms
from gpufleet.scheduler.plugins.base import OrderBase
from gpufleet.scheduler.service_history import ServiceHistory
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, ServiceMark, Snapshot
from gpufleet.scheduler.usage import QueueUsage, capacity_of

NAME = "order/las"

TIRESIAS_THRESHOLDS_GPU_S = (3250.0, 7200.0)


class Plugin(OrderBase):
    def __init__(
        self,
        thresholds_gpu_s: Sequence[float] = TIRESIAS_THRESHOLDS_GPU_S,
        starvation_factor: float = 0.0,
        within: str = "fifo",
        history_window: int = 200,
        starvation_cap_s: float = 0.0,
        age_limit_s: float = 0.0,
        aged_share: float = 1.0,
        min_run_s: float = 0.0,
        aged_by: str = "age",
        aged_slack: float = 0.0,
        fifo_slack: float = 0.0,
        fifo_floor_q: float = 0.0,
        kept: str = "aged",
        unsaved_once: bool = True,
        exchange: float = 0.0,
    ) -> None:
        self.unsaved_once = bool(unsaved_once)
        th = [float(t) for t in thresholds_gpu_s]
        if th != sorted(th) or any(t <= 0 for t in th):
            raise ValueError("thresholds_gpu_s must be positive and increasing")
        if not starvation_factor >= 0 or not starvation_cap_s >= 0 or not age_limit_s >= 0:
            raise ValueError(
                "starvation_factor, starvation_cap_s and age_limit_s must be 0 (off) or above"
            )
        if not 0 < aged_share <= 1 or not min_run_s >= 0 or not aged_slack >= 0 <= fifo_slack:
            raise ValueError(
                "aged_share must be in (0, 1]; min_run_s, aged_slack, fifo_slack 0 (off) or above"
            )
        if kept not in ("aged", "admitted"):
            raise ValueError("kept must be 'aged' or 'admitted'")
        if within not in ("fifo", "history"):
            raise ValueError("within must be 'fifo' or 'history'")
        if aged_by not in ("age", "remaining"):
            raise ValueError("aged_by must be 'age' or 'remaining'")
        if not 0 <= fifo_floor_q < 1:
            raise ValueError("fifo_floor_q must be in [0, 1)")
        if not exchange >= 0:
            raise ValueError("exchange must be 0 (off) or above")
        self.thresholds = th
        self.starvation_factor = float(starvation_factor)
        self.starvation_cap_s = float(starvation_cap_s)
        self.age_limit_s = float(age_limit_s)
        self.aged_share = float(aged_share)
        self.min_run_s = float(min_run_s)
        self.aged_by = aged_by
        self.aged_slack = float(aged_slack)
        self.fifo_slack = float(fifo_slack) if within == "history" else 0.0
        self.aging = self.age_limit_s > 0 or self.fifo_slack > 0
        self.kept = kept
        self.fifo_floor_q = float(fifo_floor_q)
        self._spans: deque[float] = deque()  # the last jobs' FIFO estimates, as they came
        self._spans_sorted: list[float] = []
        self._deadline: dict[str, float] = {}  # fifo_slack's, by job id
        # a memo: the aged jobs ``admitted`` lets ahead in the snapshot last asked of
        self._admitted: frozenset[str] = frozenset()
        self._admitted_for: Snapshot | None = None
        # what ``outranked`` reads of each running job that does not change while it runs, and
        # the list of them for the running jobs last asked of
        self._terms = RunningTerms(self.unsaved_once)
        self.history = ServiceHistory(history_window) if within == "history" else None
        self.exchange = (
            las_exchange.Exchange(self.history, exchange) if self.history and exchange else None
        )

    def finished(self, spec: JobSpec, service_gpu_s: float) -> None:
        if self.history is not None and service_gpu_s > 0:
            self.history.learn(spec, service_gpu_s)

    def level_of(self, attained_gpu_s: float) -> int:
        return bisect_right(self.thresholds, attained_gpu_s)

    def starved(self, p: PendingJob, now: float) -> bool:
        """Whether Tiresias' rule promotes ``p`` now: its wait since it first ran reached
        ``starvation_factor`` times its run time, both since its last promotion."""
        m = p.mark
        if self.starvation_factor <= 0 or m.stopped_at is None:
            return False
        service = p.attained_gpu_s - m.base_gpu_s
        gpus = p.spec.total_gpu_milli / 1000
        limit = self.starvation_factor * service / gpus if gpus > 0 else 0.0
        if self.starvation_cap_s > 0:
            limit = min(limit, self.starvation_cap_s)
        return service > 0 < gpus and m.waited(now) >= limit

    def aged(self, p: PendingJob, now: float) -> bool:
        """Whether ``p`` has been in the system ``age_limit_s`` or more (0: never), plus
        ``aged_slack`` times the run time the history expects it still needs."""
        start = p.submit_time + self.age_limit_s  # when it ages, before the slack
        if self.fifo_slack > 0:
            start = max(start, self._deadline.get(p.id, float("inf")))
        elif self.age_limit_s <= 0:
            return False
        if now < start:
            return False
        if self.aged_slack <= 0 or self.history is None:
            return True
        rest = self.history.remaining(p.spec, p.attained_gpu_s)
        gpus = p.spec.total_gpu_milli / 1000
        return rest is None or gpus <= 0 or now >= start + self.aged_slack * rest / gpus

    def admitted(self, snap: Snapshot) -> frozenset[str] | None:
        """The aged pending jobs let ahead in ``snap``; None: every job past the age limit (no
        share, no slack)."""
        if self.fifo_slack <= 0 and (
            (self.aged_share >= 1 and self.aged_slack <= 0) or self.age_limit_s <= 0
        ):
            return None
        if self._admitted_for is snap:
            return self._admitted
        if self.fifo_slack > 0 and self.history is not None:
            self._set_deadlines(snap, self.history)
        cap = snap.capacity or capacity_of(snap.nodes)
        held = sum(r.spec.total_gpu_milli for r in snap.running if r.mark.aged)
        room = self.aged_share * cap.gpu_milli - held
        born, ids = snap.now - self.age_limit_s, list[str]()
        aged = [p for p in snap.pending if p.submit_time <= born and self.aged(p, snap.now)]
        if self.aged_by == "remaining" and self.history is not None:
            aged.sort(key=self._expected_rest(self.history))
        for p in aged:  # the oldest (or the nearest done) first, while the share lasts
            g = p.spec.total_gpu_milli
            if g > room and (ids or held > 0):
                break
            ids.append(p.id)
            room -= g
        self._admitted, self._admitted_for = frozenset(ids), snap
        return self._admitted

    def is_aged(self, p: PendingJob, snap: Snapshot) -> bool:
        if not self.aged(p, snap.now):
            return False
        ids = self.admitted(snap)
        return ids is None or p.id in ids

    def pending_level(self, p: PendingJob, now: float, snap: Snapshot | None = None) -> int:
        if self.starvation_factor <= 0 and not self.aging:  # neither test can hold
            return bisect_right(self.thresholds, p.attained_gpu_s - p.mark.base_gpu_s)
        if self.starved(p, now):
            return 0
        if self.aged(p, now) and (snap is None or self.is_aged(p, snap)):
            return 0
        return bisect_right(self.thresholds, p.attained_gpu_s - p.mark.base_gpu_s)

    def started(self, job: PendingJob, now: float) -> ServiceMark:
        if self.aged(job, now) and self._kept(job, now):  # kept running to its end
            return ServiceMark(job.attained_gpu_s, aged=True)
        if self.starved(job, now):  # promoted: its levels count from here, its waits anew
            return ServiceMark(job.attained_gpu_s)
        return super().started(job, now)

    def _kept(self, job: PendingJob, now: float) -> bool:
        """``kept: admitted``: only an aged job the share let ahead (this cycle's memo)."""
        if self.kept == "aged":
            return True
        snap = self._admitted_for
        return snap is None or snap.now != now or job.id in self._admitted

    def order(
        self, pending: Sequence[PendingJob], snap: Snapshot, usage: QueueUsage
    ) -> Iterator[PendingJob]:
        now = snap.now
        admitted = self.admitted(snap)
        if self.history is not None:
            return self._by_prediction(pending, now, self.history, admitted)
        if pending is snap.pending and snap.pending_index is not None:
            return self._by_level(pending, now, admitted)
        return iter(
            sorted(pending, key=lambda p: (self.pending_level(p, now, snap), p.submit_time, p.seq))
        )

    def _levels(
        self, pending: Sequence[PendingJob], now: float, admitted: frozenset[str] | None
    ) -> list[list[PendingJob]]:
        """``pending`` split by ``pending_level``, each in its given order, after a first list
        of the aged jobs (``age_limit_s``; level 0 too, ahead of the rest); written out (a busy
        cluster's cycles ask it of every pending job): a job that never ran is level 0 without
        a look at its mark, and ``starved``'s test is inlined."""
        th = self.thresholds
        levels: list[list[PendingJob]] = [[] for _ in range(len(th) + 2)]
        aged, first, knob = levels[0], levels[1], self.starvation_factor * 1000
        cap = self.starvation_cap_s or float("inf")
        born = now - self.age_limit_s if self.aging else float("-inf")
        for p in pending:
            if p.submit_time <= born and (admitted is None or p.id in admitted):
                aged.append(p)
                continue
            a = p.attained_gpu_s
            if a <= 0:
                first.append(p)
                continue
            m = p.mark
            service = a - m.base_gpu_s
            stopped = m.stopped_at
            if knob > 0 and stopped is not None and service > 0:
                s = p.spec
                milli = s.workers * s.gpus_per_worker * s.gpu_milli  # total_gpu_milli
                if milli > 0 and m.waited_s + now - stopped >= min(knob * service / milli, cap):
                    first.append(p)
                    continue
            levels[1 + bisect_right(th, service)].append(p)
        return levels

    def _by_prediction(
        self,
        pending: Sequence[PendingJob],
        now: float,
        history: ServiceHistory,
        admitted: frozenset[str] | None,
    ) -> Iterator[PendingJob]:
        """By level, then least expected remaining service (unknown: last), then FIFO. Levels
        are split first and each sorted only when the walk gets to it; the prediction is
        worked out once per (queue, shape, service), which most jobs of a level share."""
        levels = self._levels(pending, now, admitted)
        memo: dict[tuple[str, int, int, int, float], float] = {}

        def rest(p: PendingJob) -> float:
            s = p.spec
            k = (s.queue, s.workers, s.gpus_per_worker, s.gpu_milli, p.attained_gpu_s)
            r = memo.get(k)
            if r is None:
                got = history.remaining(s, p.attained_gpu_s)
                r = memo[k] = float("inf") if got is None else got
            return r

        def walk() -> Iterator[PendingJob]:
            if self.aged_by == "remaining":
                levels[0].sort(key=rest)
            yield from levels[0]  # the aged, first come first (or nearest done first)
            for level in levels[1:]:
                level.sort(key=lambda p: (p.submit_time, p.seq))
                level.sort(key=rest)  # stable: FIFO among equal predictions
                yield from level

        return walk()

    def _set_deadlines(self, snap: Snapshot, history: ServiceHistory) -> None:
        """``fifo_slack``'s deadline of each pending job ``snap`` shows first (module doc)."""
        pending, known = snap.pending, self._deadline
        if all(p.id in known for p in pending):
            return
        now, memo = snap.now, dict[tuple[str, int, float], float]()

        def rest(spec: JobSpec, attained: float) -> float | None:
            k = (spec.queue, spec.total_gpu_milli, attained)
            if k not in memo:
                got = history.remaining(spec, attained)
                memo[k] = -1.0 if got is None else got
            r = memo[k]
            return None if r < 0 else r

        gpus = (snap.capacity or capacity_of(snap.nodes)).gpu_milli / 1000 or 1.0
        ahead = sum(rest(r.spec, r.attained(now)) or 0.0 for r in snap.running)
        for p in pending:  # in arrival order: the backlog ahead of each grows along the list
            mine = rest(p.spec, p.attained_gpu_s)
            if p.id not in known and mine is not None:
                own = mine / max(p.spec.total_gpu_milli / 1000, 1e-3)
                span = self._floored(ahead / gpus + own)
                known[p.id] = p.submit_time + self.fifo_slack * span
            ahead += mine or 0.0
        if len(known) > 2 * (len(pending) + len(snap.running)) + 1000:  # forget the finished
            alive = {p.id for p in pending} | {r.id for r in snap.running}
            self._deadline = {i: d for i, d in known.items() if i in alive}

    def _floored(self, span: float) -> float:
        """``span``, or the ``fifo_floor_q`` quantile of the last 1,000 jobs' spans (this one
        in) where that is more."""
        if self.fifo_floor_q <= 0:
            return span
        self._spans.append(span)
        insort(self._spans_sorted, span)
        if len(self._spans) > 1000:
            old = self._spans.popleft()
            del self._spans_sorted[bisect_right(self._spans_sorted, old) - 1]
        s = self._spans_sorted
        return max(span, s[min(int(self.fifo_floor_q * len(s)), len(s) - 1)])

    @staticmethod
    def _expected_rest(history: ServiceHistory) -> Callable[[PendingJob], float]:
        def rest(p: PendingJob) -> float:
            got = history.remaining(p.spec, p.attained_gpu_s)
            return float("inf") if got is None else got

        return rest

    def _by_level(
        self, pending: Sequence[PendingJob], now: float, admitted: frozenset[str] | None
    ) -> Iterator[PendingJob]:
        """``order`` for jobs already by ``(submit_time, seq)`` (a snapshot's pending jobs with
        its index): a stable split by level is that sort, without its key per job."""
        th = self.thresholds
        if self.starvation_factor <= 0 and len(th) == 1 and not self.aging:
            t = th[0]  # level 0 exactly below it (``bisect_right``)
            low = [p for p in pending if p.attained_gpu_s - p.mark.base_gpu_s < t]
            return chain(low, (p for p in pending if not p.attained_gpu_s - p.mark.base_gpu_s < t))
        if not self.aging:
            return self._first_as_found(pending, now)
        return chain.from_iterable(self._levels(pending, now, admitted))

    def _first_as_found(self, pending: Sequence[PendingJob], now: float) -> Iterator[PendingJob]:
        """``_levels``' jobs in order where nothing ages (its first list is empty): the first
        level's jobs as the split reaches them, the others after it. A cycle mostly walks a
        few jobs of a full cluster, and the split goes no further than those."""
        if self.starvation_factor > 0:  # not ``las``'s default: ``_levels``' split, no aged
            yield from chain.from_iterable(self._levels(pending, now, None))
            return
        th = self.thresholds
        later: list[list[PendingJob]] = [[] for _ in th]
        for p in pending:  # no starvation: a job's level is its service's alone
            a = p.attained_gpu_s
            level = bisect_right(th, a - p.mark.base_gpu_s) if a > 0 else 0
            if level:
                later[level - 1].append(p)
            else:
                yield p
        yield from chain.from_iterable(later)

    def running_level(self, r: RunningJob, now: float) -> int:
        if r.mark.aged:
            return 0
        return bisect_right(self.thresholds, r.attained(now) - r.mark.base_gpu_s)

    def spared(self, r: RunningJob, now: float) -> bool:
        """``unsaved_once``: ``r`` lost an attempt's work before, and would lose more of this
        one's than the first queue's service."""
        return (
            self.unsaved_once
            and r.attained_gpu_s > 0
            and r.spec.preempt_notice is None
            and r.lost_work(now) > self.thresholds[0]
        )

    def outranks(self, job: PendingJob, victim: RunningJob, snap: Snapshot) -> bool:
        if snap.now - victim.start_time < self.min_run_s or self.spared(victim, snap.now):
            return False
        if self.exchange and not self.exchange.allows(job, victim, snap):
            return False
        return self.pending_level(job, snap.now, snap) < self.running_level(victim, snap.now)

    def outrank_key(self, job: PendingJob, snap: Snapshot) -> Hashable:
        """In one snapshot, ``outranks(job, v, snap)`` depends on ``job`` only through this."""
        level = self.pending_level(job, snap.now, snap)
        return (level, self.exchange.need(job)) if self.exchange else level

    def outranked(self, job: PendingJob, snap: Snapshot) -> list[RunningJob]:
        """The running jobs ``job`` outranks (in ``snap.running``'s order): those whose service
        since their last promotion reached the threshold above ``job``'s level (``level_of``
        is a ``bisect_right``, so it exceeds the level exactly there), less those not to be
        preempted (aged, inside ``min_run_s``, ``spared``: written out, from each job's fixed
        terms, ``scheduler/las_terms.py``). ``(now - saved) * milli / 1000`` is ``lost_work``,
        ``service + (now - start) * milli / 1000`` ``r.attained(now) - base``: the same sums,
        in the same order."""
        level = self.pending_level(job, snap.now, snap)
        if level >= len(self.thresholds):
            return []
        t, first = self.thresholds[level], self.thresholds[0]
        now = snap.now
        started = now - self.min_run_s  # a job started after this is not preempted yet
        out = [
            r
            for r, kept, start, service, milli, saved, unsaved in self._terms.of(snap.running)
            if not kept
            and start <= started
            and service + (now - start) * milli / 1000 >= t
            and not (unsaved and (now - saved) * milli / 1000 > first)
        ]
        if self.exchange and out:
            x, need = self.exchange, self.exchange.need(job)
            out = [r for r in out if las_exchange.gains(need, x.worth(r, snap))]
        return out
