"""The start plan as the scheduler would play it out: time runs forward from the cycle, jobs end
at their predicted times, and at each end the pending jobs are taken in the order plugin's order
*on the usage of that moment*, EASY-style (the first that does not fit gets the earliest time
enough GPUs are free, and the jobs behind it start only where they do not delay that).

Pure; counted in GPUs over the cluster, like the plan it replaces. Why forward: under fair share
a queue's turn depends on what it runs, which changes with every start and end; a plan that
orders every pending job once, on the usage the cycle leaves, runs one queue's whole backlog
before the next and puts the big jobs of a queue under its share ahead of a flood of small ones
that in fact interleave with them (on Philly's first 10,000 jobs, 463 of 506 sampled estimates
were one queue's 1-GPU jobs behind two other queues' 32-GPU jobs). Orders without a ``share``
(fifo, sjf, las) keep one order for the whole plan: their ranks do not move with usage. Fair
share's past usage moves too: it is accrued (and decayed) as the plan runs, as the core's ledger
would have it at each moment.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, cast

from gpufleet.model.resources import Resources
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.usage import DecayedUsage, QueueUsage

INF = math.inf
BACKFILL_SCAN = 200  # jobs looked at in order behind a blocked head, per moment


class _Shares(Protocol):
    def share(self, queue: str, snap: Snapshot, usage: QueueUsage) -> float: ...


class _PastView:
    """The snapshot as the order sees it later in the plan: its past usage as accrued by then
    (``usage``), everything else the snapshot's."""

    __slots__ = ("_snap", "usage")

    def __init__(self, snap: Snapshot, usage: dict[str, float]) -> None:
        self._snap, self.usage = snap, usage

    def __getattr__(self, name: str) -> object:
        return getattr(self._snap, name)


class Forward:
    """One forward play of the pending ``jobs`` (in the order plugin's order) from ``now``.

    ``ends``: (end, GPU milli, queue, job) of what holds GPUs at ``now`` (running, started this
    cycle), ``fixed``: (start, end, GPU milli, queue) of what holds them later (the EASY
    reservation's job). ``end_of(job, start)`` is a job's predicted end, ``admits(job, t)`` its
    queue's quota at ``t`` (the queue it would start in, or None)."""

    def __init__(
        self,
        snap: Snapshot,
        usage: QueueUsage,
        shares: _Shares | None,
        cap: int,
        end_of: Callable[[PendingJob, float], float],
        admits: Callable[[PendingJob, float], str | None],
        started: Callable[[PendingJob, float, float, str], None],
    ) -> None:
        self.snap, self.usage, self.shares, self.cap = snap, usage, shares, cap
        self.end_of, self.admits, self.started = end_of, admits, started
        self.free = cap
        self.now = snap.now
        # (end, seq, GPU milli, queue, resources): what holds GPUs now, by end (a heap)
        self._ends: list[tuple[float, int, int, str, Resources]] = []
        # (start, seq, end, GPU milli, queue, resources): what will hold them, by start
        self._later: list[tuple[float, int, float, int, str, Resources]] = []
        self._seq = 0
        self._eligible: list[float] = []
        self._by_run: list[tuple[float, int, PendingJob]] = []  # (run time, rank, job)
        self._runs: list[float] = []
        # fair share's past usage, accrued (and decayed) as the plan runs, as the core's ledger
        # does between cycles: a queue that runs most of a long plan has a larger share by its end
        half_life = getattr(shares, "half_life_s", None)
        self._past: DecayedUsage | None = None
        self._view = snap
        if shares is not None and half_life:
            self._past = DecayedUsage(float(half_life))
            self._past.restore(snap.usage, snap.now, snap.now)
            self._view = cast(Snapshot, _PastView(snap, self._past.values))

    def hold(self, start: float, end: float, queue: str, res: Resources) -> None:
        """``res`` held from ``start`` (≤ now: already, and counted in ``usage``) until
        ``end``."""
        self._seq += 1
        if start <= self.now:
            self.free -= res.gpu_milli
            heapq.heappush(self._ends, (end, self._seq, res.gpu_milli, queue, res))
        else:
            heapq.heappush(self._later, (start, self._seq, end, res.gpu_milli, queue, res))

    def play(self, jobs: Sequence[PendingJob], limit: int) -> dict[str, float]:
        """Each job's start (those that start before ``limit`` jobs have)."""
        queues: dict[str, list[PendingJob]] = {}
        for j in jobs:
            queues.setdefault(j.spec.queue if self.shares else "", []).append(j)
        pos = dict.fromkeys(queues, 0)
        done: set[str] = set()
        starts: dict[str, float] = {}
        need_min = min((j.spec.total_gpu_milli for j in jobs), default=0)
        # the back-offs that end later are moments too (a job becomes eligible)
        self._eligible = sorted({j.eligible_time for j in jobs if j.eligible_time > self.now})
        # the jobs by predicted run time, for the backfill behind a blocked head
        rank = {j.id: i for line in queues.values() for i, j in enumerate(line)}
        by_run = sorted((self.end_of(j, 0.0), n, j) for n, j in enumerate(jobs))
        self._by_run = [(run, rank[j.id], j) for run, _, j in by_run]
        self._runs = [run for run, _, _ in by_run]
        t = self.now
        while len(starts) < min(limit, len(jobs)) and t < INF:
            self._accrue(t)
            self._release(t)
            if self.free >= need_min:
                for job in self._at(t, queues, pos, done):
                    starts[job.id] = t
                    if len(starts) >= limit:
                        break
            t = self._next(t)
        return starts

    def _accrue(self, t: float) -> None:
        """The past usage at ``t``: the shares held since the last moment, added, decayed."""
        past = self._past
        if past is not None and past.last is not None and t > past.last:
            usage = self.usage
            past.advance(t, {q: usage.dominant_share(q) for q in usage.used})

    def _release(self, t: float) -> None:
        ends, later = self._ends, self._later
        while later and later[0][0] <= t:
            _, seq, end, milli, queue, res = heapq.heappop(later)
            self.free -= milli
            self.usage.add(queue, res)
            heapq.heappush(ends, (end, seq, milli, queue, res))
        while ends and ends[0][0] <= t:
            _, _, milli, queue, res = heapq.heappop(ends)
            self.free += milli
            self.usage.remove(queue, res)

    def _next(self, t: float) -> float:
        nxt = INF
        if self._ends:
            nxt = self._ends[0][0]
        if self._later:
            nxt = min(nxt, self._later[0][0])
        i = bisect.bisect_right(self._eligible, t)
        if i < len(self._eligible):
            nxt = min(nxt, self._eligible[i])
        return nxt if nxt > t else t + 1e-9

    def _order(
        self, queues: dict[str, list[PendingJob]], pos: dict[str, int], done: set[str]
    ) -> Iterator[PendingJob]:
        """The jobs left, in the order of this moment: queue by queue on their shares now."""
        names = [q for q in queues if pos[q] < len(queues[q])]
        if self.shares is not None:
            shares, snap, usage = self.shares, self._view, self.usage
            names.sort(key=lambda q: shares.share(q, snap, usage))
        for q in names:
            line = queues[q]
            i = pos[q]
            while i < len(line) and line[i].id in done:
                i += 1
            pos[q] = i
            for j in line[i:]:
                if j.id not in done:
                    yield j

    def _at(
        self,
        t: float,
        queues: dict[str, list[PendingJob]],
        pos: dict[str, int],
        done: set[str],
    ) -> list[PendingJob]:
        """The jobs that start at ``t``: in order while they fit; past the first that does not
        (a wall at its shadow time: the GPUs left over then), those that fit and do not
        delay it. What will hold GPUs later (the EASY reservation) is a wall too."""
        started: list[PendingJob] = []
        walls = self._walls()  # [time, GPUs free then]: a job running past it takes from it
        reorder = True
        while reorder:  # fair share: the order anew after each start (its shares moved)
            reorder = False
            for job in self._order(queues, pos, done):
                if job.eligible_time > t:
                    continue
                if self._try(job, t, walls, done, started):
                    if self.free <= 0:
                        return started
                    if self.shares is not None:
                        reorder = True
                        break
                    continue
                walls.append(list(self._shadow(t, job.spec.total_gpu_milli)))
                break
            else:
                return started  # every job left has started
        self._backfill(t, queues, pos, done, walls, started)
        return started

    def _backfill(
        self,
        t: float,
        queues: dict[str, list[PendingJob]],
        pos: dict[str, int],
        done: set[str],
        walls: list[list[float]],
        started: list[PendingJob],
    ) -> None:
        """Behind a blocked head: the jobs that end before the first wall (found by run time,
        not by scanning the queue), in order; then, while every wall has room, those that fit
        in it (at most ``BACKFILL_SCAN`` looked at)."""
        first = min(at for at, _ in walls)
        k = bisect.bisect_right(self._runs, first - t)
        short = [(i, j) for _, i, j in self._by_run[:k] if j.id not in done]
        if short:
            rank = self._queue_rank(queues)
            short.sort(key=lambda ij: (rank.get(self._line(ij[1]), 0), ij[0]))
            for _, job in short:
                if self.free <= 0:
                    return
                if job.eligible_time <= t:
                    self._try(job, t, walls, done, started)
        if k > 64 and sum(1 for _, _, j in self._by_run[:k] if j.id in done) * 2 > k:
            self._by_run = [x for x in self._by_run if x[2].id not in done]  # done ones out
            self._runs = [run for run, _, _ in self._by_run]
        for scanned, job in enumerate(self._order(queues, pos, done)):
            room = min((r for _, r in walls), default=INF)
            if self.free <= 0 or room <= 0 or scanned >= BACKFILL_SCAN:
                return
            if job.eligible_time <= t and job.spec.total_gpu_milli <= room:
                self._try(job, t, walls, done, started)

    def _line(self, job: PendingJob) -> str:
        return job.spec.queue if self.shares is not None else ""

    def _queue_rank(self, queues: dict[str, list[PendingJob]]) -> dict[str, int]:
        if self.shares is None:
            return {}
        shares, snap, usage = self.shares, self._view, self.usage
        names = sorted(queues, key=lambda q: shares.share(q, snap, usage))
        return {q: i for i, q in enumerate(names)}

    def _try(
        self,
        job: PendingJob,
        t: float,
        walls: list[list[float]],
        done: set[str],
        started: list[PendingJob],
    ) -> bool:
        """Start ``job`` at ``t`` if it fits now and past every wall it runs over."""
        need = job.spec.total_gpu_milli
        if need > self.free:
            return False
        end = self.end_of(job, t)
        if any(need > room for at, room in walls if at < end):
            return False
        queue = self.admits(job, t)
        if queue is None:
            return False
        for w in walls:
            if end > w[0]:
                w[1] -= need
        self.free -= need
        self.usage.add(queue, job.spec.total_resources)
        self._seq += 1
        heapq.heappush(self._ends, (end, self._seq, need, queue, job.spec.total_resources))
        done.add(job.id)
        started.append(job)
        self.started(job, t, end, queue)
        return True

    def _walls(self) -> list[list[float]]:
        """For each hold to come, [its start, the GPUs free just after it starts]."""
        if not self._later:
            return []
        out = []
        for s in sorted(x[0] for x in self._later):
            back = sum(m for e, _, m, _, _ in self._ends if e <= s)
            taken = sum(m for s2, _, _, m, _, _ in self._later if s2 <= s)
            out.append([s, float(self.free + back - taken)])
        return out

    def _shadow(self, t: float, need: int) -> tuple[float, float]:
        """When ``need`` GPUs are first free (ends only; holds to come counted as they come),
        and how many are left over then."""
        free = self.free
        ends = list(self._ends)  # a copy of the heap, popped in time order
        later = sorted((s, m) for s, _, _, m, _, _ in self._later)
        k = 0
        while ends:
            at, _, m, _, _ = heapq.heappop(ends)
            while k < len(later) and later[k][0] <= at:
                free -= later[k][1]
                k += 1
            free += m
            if free >= need:
                return at, float(free - need)
        return INF, 0.0
