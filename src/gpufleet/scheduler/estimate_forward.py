"""The start plan as the scheduler would play it out: time runs forward from the cycle, jobs end
at their predicted times, and at each end the pending jobs are taken in the order plugin's order
*on the usage of that moment*, EASY-style (the first that does not fit gets the earliest time
enough GPUs are free, and the jobs behind it start only where they do not delay that).

Pure; counted in GPUs over the cluster, like the plan it replaces, and for a job of several
GPUs per worker per node too (``estimate_nodes``: it starts, and its shadow is, where enough
nodes each have room for a worker; its wall keeps those nodes, and a count over the cluster of
the GPUs left, from the jobs that would run past it). Why forward: under fair share a queue's
turn depends on what it runs, which changes with every start and end; a plan that
orders every pending job once, on the usage the cycle leaves, runs one queue's whole backlog
before the next and puts the big jobs of a queue under its share ahead of a flood of small ones
that in fact interleave with them (on Philly's first 10,000 jobs, 463 of 506 sampled estimates
were one queue's 1-GPU jobs behind two other queues' 32-GPU jobs). Orders without a ``share``
(fifo, sjf, las) keep one order for the whole plan: their ranks do not move with usage.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from gpufleet.model.resources import Resources
from gpufleet.scheduler.estimate_nodes import NodeRoom, Probe, Takes, Wall, node_checked
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

INF = math.inf
BACKFILL_SCAN = 200  # jobs looked at in order behind a blocked head, per moment


class _Shares(Protocol):
    def share(self, queue: str, snap: Snapshot, usage: QueueUsage) -> float: ...


class Forward:
    """One forward play of the pending ``jobs`` (in the order plugin's order) from ``now``.

    ``ends``: (end, GPU milli, queue, job) of what holds GPUs at ``now`` (running, started this
    cycle), ``fixed``: (start, end, GPU milli, queue) of what holds them later (the EASY
    reservation's job). ``end_of(job, start)`` is a job's predicted end, ``admits(job, t)`` its
    queue's quota at ``t`` (the queue it would start in, or None). ``nodes``: each node's free
    GPUs, where the holds' ``takes`` are counted and the planned starts placed (None: GPUs over
    the cluster only); ``big_only``: only the planned starts of several whole GPUs a worker are
    placed there (and kept off a wall's nodes), the others counted over the cluster only."""

    def __init__(
        self,
        snap: Snapshot,
        usage: QueueUsage,
        shares: _Shares | None,
        cap: int,
        end_of: Callable[[PendingJob, float], float],
        admits: Callable[[PendingJob, float], str | None],
        started: Callable[[PendingJob, float, float, str], None],
        nodes: NodeRoom | None = None,
        big_only: bool = False,
    ) -> None:
        self.snap, self.usage, self.shares, self.cap = snap, usage, shares, cap
        self.big_only = big_only
        self.end_of, self.admits, self.started = end_of, admits, started
        self.free = cap
        self.nodes = nodes
        self.now = snap.now
        # (end, seq, GPU milli, queue, resources, where): what holds GPUs now, by end (a heap)
        self._ends: list[tuple[float, int, int, str, Resources, Takes]] = []
        # (start, seq, end, GPU milli, queue, resources, where): what will hold them, by start
        self._later: list[tuple[float, int, float, int, str, Resources, Takes]] = []
        self._seq = 0
        self._eligible: list[float] = []
        self._by_run: list[tuple[float, int, PendingJob]] = []  # (run time, rank, job)
        self._runs: list[float] = []
        self._future: Iterator[PendingJob] = iter(())  # the jobs to come, by arrival
        self._coming: PendingJob | None = None  # the next of them
        self._forecast: set[str] = set()  # the ids of those that came
        self._need_min = 0

    def hold(self, start: float, end: float, queue: str, res: Resources, takes: Takes = ()) -> None:
        """``res`` held from ``start`` (≤ now: already, and counted in ``usage``) until
        ``end``, on the nodes ``takes`` says."""
        self._seq += 1
        if start <= self.now:
            self.free -= res.gpu_milli
            if self.nodes is not None:
                self.nodes.take(takes)
            heapq.heappush(self._ends, (end, self._seq, res.gpu_milli, queue, res, takes))
        else:
            item = (start, self._seq, end, res.gpu_milli, queue, res, takes)
            heapq.heappush(self._later, item)

    def play(
        self,
        jobs: Sequence[PendingJob],
        limit: int,
        future: Iterator[PendingJob] | None = None,
    ) -> dict[str, float]:
        """Each job's start (those that start before ``limit`` jobs have). ``future``: the jobs
        forecast to arrive, in time order (each eligible from its arrival): they join their
        queue's line as they come and take their turn, but are not planned themselves."""
        queues: dict[str, list[PendingJob]] = {}
        for j in jobs:
            queues.setdefault(j.spec.queue if self.shares else "", []).append(j)
        pos = dict.fromkeys(queues, 0)
        done: set[str] = set()
        starts: dict[str, float] = {}
        self._need_min = min((j.spec.total_gpu_milli for j in jobs), default=0)
        # the back-offs that end later are moments too (a job becomes eligible)
        self._eligible = sorted({j.eligible_time for j in jobs if j.eligible_time > self.now})
        # the jobs by predicted run time, for the backfill behind a blocked head
        rank = {j.id: i for line in queues.values() for i, j in enumerate(line)}
        by_run = sorted((self.end_of(j, 0.0), n, j) for n, j in enumerate(jobs))
        self._by_run = [(run, rank[j.id], j) for run, _, j in by_run]
        self._runs = [run for run, _, _ in by_run]
        if future is not None:
            self._future = future
            self._coming = next(future, None)
        forecast = self._forecast
        t = self.now
        while len(starts) < min(limit, len(jobs)) and t < INF:
            self._release(t)
            self._arrive(t, queues, pos)
            if self.free >= self._need_min:
                for job in self._at(t, queues, pos, done):
                    if job.id in forecast:
                        continue
                    starts[job.id] = t
                    if len(starts) >= limit:
                        break
            t = self._next(t)
        return starts

    def _arrive(self, t: float, queues: dict[str, list[PendingJob]], pos: dict[str, int]) -> None:
        """The jobs forecast to arrive by ``t`` join the back of their queue's line."""
        while self._coming is not None and self._coming.eligible_time <= t:
            job = self._coming
            line = job.spec.queue if self.shares else ""
            if line not in queues:
                queues[line], pos[line] = [], 0
            queues[line].append(job)
            self._forecast.add(job.id)
            self._need_min = min(self._need_min, job.spec.total_gpu_milli)
            self._coming = next(self._future, None)

    def _release(self, t: float) -> None:
        ends, later = self._ends, self._later
        nodes = self.nodes
        while later and later[0][0] <= t:
            _, seq, end, milli, queue, res, takes = heapq.heappop(later)
            self.free -= milli
            self.usage.add(queue, res)
            if nodes is not None:
                nodes.take(takes)
            heapq.heappush(ends, (end, seq, milli, queue, res, takes))
        while ends and ends[0][0] <= t:
            _, _, milli, queue, res, takes = heapq.heappop(ends)
            self.free += milli
            self.usage.remove(queue, res)
            if nodes is not None:
                nodes.give(takes)

    def _next(self, t: float) -> float:
        nxt = INF
        if self._ends:
            nxt = self._ends[0][0]
        if self._later:
            nxt = min(nxt, self._later[0][0])
        i = bisect.bisect_right(self._eligible, t)
        if i < len(self._eligible):
            nxt = min(nxt, self._eligible[i])
        if self._coming is not None:
            nxt = min(nxt, self._coming.eligible_time)
        return nxt if nxt > t else t + 1e-9

    def _order(
        self, queues: dict[str, list[PendingJob]], pos: dict[str, int], done: set[str]
    ) -> Iterator[PendingJob]:
        """The jobs left, in the order of this moment: queue by queue on their shares now."""
        names = [q for q in queues if pos[q] < len(queues[q])]
        if self.shares is not None:
            shares, snap, usage = self.shares, self.snap, self.usage
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
        walls = self._walls()  # a job running past one takes from its room, off its nodes
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
                walls.append(self._shadow(job))
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
        walls: list[Wall],
        started: list[PendingJob],
    ) -> None:
        """Behind a blocked head: the jobs that end before the first wall (found by run time,
        not by scanning the queue), in order; then, while every wall has room, those that fit
        in it (at most ``BACKFILL_SCAN`` looked at)."""
        first = min(w.at for w in walls)
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
            room = min((w.room for w in walls), default=INF)
            if self.free <= 0 or room <= 0 or scanned >= BACKFILL_SCAN:
                return
            if job.eligible_time <= t and job.spec.total_gpu_milli <= room:
                self._try(job, t, walls, done, started)

    def _line(self, job: PendingJob) -> str:
        return job.spec.queue if self.shares is not None else ""

    def _queue_rank(self, queues: dict[str, list[PendingJob]]) -> dict[str, int]:
        if self.shares is None:
            return {}
        shares, snap, usage = self.shares, self.snap, self.usage
        names = sorted(queues, key=lambda q: shares.share(q, snap, usage))
        return {q: i for i, q in enumerate(names)}

    def _try(
        self,
        job: PendingJob,
        t: float,
        walls: list[Wall],
        done: set[str],
        started: list[PendingJob],
    ) -> bool:
        """Start ``job`` at ``t`` if it fits now and past every wall it runs over (in the
        wall's room, off the nodes it keeps)."""
        spec = job.spec
        need = spec.total_gpu_milli
        if need > self.free:
            return False
        end = self.end_of(job, t)
        over = [w for w in walls if w.at < end]
        if any(need > w.room for w in over):
            return False
        nodes = self.nodes
        if nodes is not None and self.big_only and not node_checked(*shape_of(job)[:2]):
            nodes = None  # counted over the cluster, not placed
        avoid: frozenset[int] = frozenset().union(*(w.fenced for w in over))
        shape = shape_of(job)
        if nodes is not None and not nodes.fits(*shape, avoid):
            return False
        queue = self.admits(job, t)
        if queue is None:
            return False
        for w in over:
            w.room -= need
        self.free -= need
        self.usage.add(queue, spec.total_resources)
        self._seq += 1
        takes: Takes = () if nodes is None else nodes.place(*shape, avoid)
        heapq.heappush(self._ends, (end, self._seq, need, queue, spec.total_resources, takes))
        done.add(job.id)
        started.append(job)
        self.started(job, t, end, queue)
        return True

    def _walls(self) -> list[Wall]:
        """For each hold to come, a wall at its start: the GPUs free just after it starts, and
        the nodes of the holds come by then."""
        if not self._later:
            return []
        out = []
        for s in sorted(x[0] for x in self._later):
            back = sum(x[2] for x in self._ends if x[0] <= s)
            taken = sum(x[3] for x in self._later if x[0] <= s)
            fenced = frozenset(n for x in self._later if x[0] <= s for n, _ in x[6])
            out.append(Wall(s, float(self.free + back - taken), fenced))
        return out

    def _shadow(self, job: PendingJob) -> Wall:
        """The wall of a blocked ``job``: when it can first start (ends only; holds to come
        counted as they come): enough GPUs free, and for a job of several GPUs per worker enough
        nodes with room for a worker each (the nodes it would take then are kept for it, as
        EASY's reservation keeps them); and how many GPUs are left over then, over the
        cluster."""
        spec = job.spec
        need = spec.total_gpu_milli
        probe = None
        if self.nodes is not None and node_checked(spec.gpus_per_worker, spec.gpu_milli):
            probe = Probe(self.nodes)
        free = self.free
        ends = list(self._ends)  # a copy of the heap, popped in time order
        later = sorted((x[0], x[3], x[6]) for x in self._later)
        k = 0
        while ends:
            at, _, m, _, _, takes = heapq.heappop(ends)
            while k < len(later) and later[k][0] <= at:
                free -= later[k][1]
                if probe is not None:
                    probe.add(later[k][2], -1)
                k += 1
            free += m
            if probe is not None:
                probe.add(takes, 1)
            if probe is None:
                if free >= need:
                    return Wall(at, float(free - need))
            elif free >= need and probe.fits(spec.gpus_per_worker, spec.workers):
                fenced = probe.pick(spec.gpus_per_worker, spec.workers)
                return Wall(at, float(free - need), fenced)
        return Wall(INF, 0.0)


def shape_of(job: PendingJob) -> tuple[int, int, int]:
    """GPUs a worker, GPU milli each, workers."""
    spec = job.spec
    return spec.gpus_per_worker, spec.gpu_milli, spec.workers
