"""Step 6: a specific, structured Reason for every job still pending.

Reasons are computed per job *shape* (workers, GPUs, CPU, memory, models, topology) and cached
within the cycle, so 100,000 waiting jobs of a few shapes cost a few explanations, not 100,000.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from random import Random
from typing import TYPE_CHECKING

from gpufleet.model.engines import lacking
from gpufleet.model.job import JobSpec, TopologyLevel
from gpufleet.model.reason import Reason, ReasonCode, in_words, not_eligible
from gpufleet.model.resources import MILLI
from gpufleet.scheduler import filters
from gpufleet.scheduler.admission import admit_any
from gpufleet.scheduler.estimate import RESERVED, StartPlan
from gpufleet.scheduler.framework import Code
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.plugins.filter_engines import describe
from gpufleet.scheduler.replica_reason import replica_refusal, replicas_held, whole_behind_replicas
from gpufleet.scheduler.request import Shape, WorkerRequest, shape_of
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage
from gpufleet.scheduler.workspace import Workspace

if TYPE_CHECKING:
    from gpufleet.scheduler.decisions import CycleResult
    from gpufleet.scheduler.framework import Profile


def _gpus(n: float) -> str:
    return f"{n:g} GPU{'s' if n != 1 else ''}"


def preempting(job: PendingJob, victims: Iterable[RunningJob]) -> Reason:
    ids = [v.id for v in victims]
    return Reason(
        ReasonCode.PREEMPTING,
        f"stopping {len(ids)} job{'s' if len(ids) != 1 else ''} ({', '.join(ids[:5])}"
        f"{', …' if len(ids) > 5 else ''}) to make room",
        {"victims": ids},
    )


def moving(snap: Snapshot, res: CycleResult) -> None:
    """A gang whose defragmentation move is under way (its victims still stopping) keeps the
    move's Reason ("moving 3 jobs to free 2 nodes under leaf-4"), with how many have stopped,
    until it starts: the Reason it would get (too few GPUs free) says nothing of the move."""
    index = snap.pending_index
    if not snap.defrag_moves or (index is not None and index.nominated == 0):
        return  # a gang a move is made for is nominated until it starts
    waiting = {p.id for p in snap.pending if p.nominated} - set(res.started_ids)
    if not waiting:
        return
    stopping = {r.id for r in snap.running if r.stopping_since is not None}
    for m in snap.defrag_moves.values():
        if m.for_job not in waiting:
            continue
        left = [v for v in m.victims if v in stopping]
        if not left:
            continue  # the move is done: what keeps it now is said as for any job
        n = len(m.victims)
        waits = [v for v in left if v in m.replacing]
        then = (
            f"; {', '.join(waits)} stop{'s' if len(waits) == 1 else ''} once "
            f"{'its replacement is' if len(waits) == 1 else 'their replacements are'} ready"
            if waits
            else ""
        )
        res.reasons[m.for_job] = Reason(
            ReasonCode.DEFRAG,
            f"{m.message}: {n - len(left)} of {n} stopped{then}",
            {**m.data, "stopping": left, "replacing": waits, "moved_at": m.time},
        )


def _empty_cluster(snap: Snapshot) -> Workspace:
    return Workspace.emptied(snap.nodes)


def never_reason(job: PendingJob, empty: Workspace) -> Reason:
    s = job.spec
    if s.selects_nodes:  # a node filter that rules the job out says why, by its own terms
        found = filters.never(s, empty.nodes)
        if found is not None:
            return found[1]
    req = WorkerRequest.of(s)
    refused = replica_refusal(s, empty)
    if refused is not None:
        return refused
    models = ", ".join(s.gpu_models) if s.gpu_models else "any model"
    total = empty.free_gpus(req)
    need = s.workers * s.gpus_per_worker
    if req.gpus and total < need:
        msg = f"needs {_gpus(need)} ({s.describe()}) of {models}; the cluster has {total}"
    elif s.topology.required and s.topology.level is not TopologyLevel.ANY and s.workers > 1:
        msg = (
            f"needs {s.describe()} under one {s.topology.level.value}; no "
            f"{s.topology.level.value} of the cluster is that large"
        )
    else:
        largest = max((empty.workers_fit(i, req) for i in range(empty.n)), default=0)
        msg = (
            f"no node can hold one worker ({s.describe()}, {s.cpu_milli / MILLI:g} CPUs, "
            f"{s.memory_mib / 1024:g} GiB)"
            if largest == 0
            else f"needs {s.describe()}; even an empty cluster cannot place it"
        )
    return Reason(ReasonCode.NEVER, msg, {"needed_gpus": need, "cluster_gpus": total})


def _node_reason(job: PendingJob, ws: Workspace, req: WorkerRequest) -> Reason | None:
    """Why a job with one worker per node (-N, --exclusive) waits: too few nodes fit now."""
    s = job.spec
    sel = req.select
    if sel is None or not sel.one_per_node:
        return None
    fit = sum(1 for i in range(ws.n) if ws.devices_for(i, req) is not None)
    if fit >= s.workers:
        return None
    what = "idle whole nodes (--exclusive)" if sel.exclusive else "distinct nodes"
    return Reason(
        ReasonCode.RESOURCES,
        f"needs {s.workers} {what}, {fit} fit now",
        {"needed_nodes": s.workers, "nodes": fit},
    )


def resource_reason(job: PendingJob, ws: Workspace) -> Reason:
    s = job.spec
    req = WorkerRequest.of(s)
    by_node = _node_reason(job, ws, req)
    if by_node is not None:
        return by_node
    need = s.workers * s.gpus_per_worker
    data: dict[str, object] = {"needed_gpus": need}
    if req.gpus == 0 or not req.whole:
        data["fractional"] = not req.whole
        if (engines := _share_engine_reason(s, req, ws, data)) is not None:
            return engines
        if (held := replicas_held(s, ws, data)) is not None:
            return held
        return Reason(
            ReasonCode.RESOURCES,
            f"needs {s.describe()} with {s.cpu_milli / MILLI:g} CPUs and "
            f"{s.memory_mib / 1024:g} GiB per worker; no node has that free now",
            data,
        )
    free = ws.free_gpus(req)
    free_any = ws.free_gpus(replace(req, models=()))
    data["free_gpus"] = free
    if (engines := _engine_reason(req, ws, need, data)) is not None:
        return engines
    if free < need:
        if s.gpu_models and free_any >= need:
            models = ", ".join(s.gpu_models)
            return Reason(
                ReasonCode.GPU_MODEL,
                f"needs {_gpus(need)} of {models}; {free} of the {free_any} free GPUs are {models}",
                data,
            )
        if (behind := whole_behind_replicas(s, ws, free, data)) is not None:
            return behind
        return Reason(
            ReasonCode.RESOURCES, f"needs {_gpus(need)} ({s.describe()}); {free} free now", data
        )
    if s.workers == 1:
        big = max(
            (k for m in ws.allowed_models(req) for k, b in enumerate(ws.buckets[m]) if b), default=0
        )
        data["largest_free_block"] = big
        if big < req.gpus:
            return Reason(
                ReasonCode.RESOURCES,
                f"needs {_gpus(req.gpus)} on one node; {free} GPUs are free but the "
                f"freest node has {big}",
                data,
            )
    elif s.topology.level is not TopologyLevel.ANY and s.topology.required:
        return _topology_reason(job, ws, req, free, data)
    return Reason(
        ReasonCode.RESOURCES,
        f"{free} GPUs are free, but not with {s.cpu_milli / MILLI:g} CPUs and "
        f"{s.memory_mib / 1024:g} GiB beside each of {s.workers} worker slots",
        data,
    )


def _engine_reason(
    req: WorkerRequest, ws: Workspace, need: int, data: dict[str, object]
) -> Reason | None:
    """A job that asks for engines (``--gres=nvenc:N``) waiting while GPUs without them are
    free: said so, naming their models ("the 3 free GPUs are H100-SXM, which have none"), not
    taken for a want of CPUs or memory."""
    want = dict(req.select.engines) if req.select is not None else {}
    if not want:
        return None
    allowed = ws.allowed_models(req)
    free = {m: n for m, n in ws.model_free.items() if n and m in allowed}
    have = sum(n for m, n in free.items() if not lacking(m, want))
    lack = {m: n for m, n in free.items() if lacking(m, want)}
    if have >= need or not lack:
        return None
    n_lack = sum(lack.values())
    names = " and ".join(m if len(lack) == 1 else f"{m} ({n})" for m, n in sorted(lack.items()))
    data["free_without_engines"] = n_lack
    if have == 0:
        what = "the free GPU is" if n_lack == 1 else f"the {n_lack} free GPUs are"
        said = f"{what} {names}, which {'has' if n_lack == 1 else 'have'} none"
    else:
        said = f"{have} free with it; the other {n_lack} free ({names}) have none"
    return Reason(ReasonCode.RESOURCES, f"needs {_gpus(need)} with {describe(want)}; {said}", data)


def _share_engine_reason(
    s: JobSpec, req: WorkerRequest, ws: Workspace, data: dict[str, object]
) -> Reason | None:
    """A share of a GPU with an engine (a video job) that would fit now only on GPUs without
    it: said so, naming those models, not taken for a want of room."""
    want = dict(req.select.engines) if req.select is not None else {}
    if not want or req.select is None or req.gpus == 0:
        return None
    bare = replace(req, select=replace(req.select, engines=()))
    room = Counter(
        ws.model[i]
        for i in range(ws.n)
        if lacking(ws.model[i], want) and ws.devices_for(i, bare) is not None
    )
    if not room:
        return None
    data["nodes_with_room_without_engines"] = sum(room.values())
    names = " and ".join(f"{m} ({n} node{'s' if n != 1 else ''})" for m, n in sorted(room.items()))
    return Reason(
        ReasonCode.RESOURCES,
        f"needs {s.describe()} with {describe(want)}; no GPU with it has that free now, and "
        f"the GPUs with room have none ({names})",
        data,
    )


def _topology_reason(
    job: PendingJob, ws: Workspace, req: WorkerRequest, free: int, data: dict[str, object]
) -> Reason:
    """Why a gang that must stay under one leaf or pod waits: the best such domain's room."""
    s = job.spec
    level = s.topology.level.value
    best = 0
    best_nodes = 0
    # the domains of the level asked for: leaves, or pods (each the sum of its leaves)
    domains = (
        [[leaf] for leaf in range(len(ws.leaf_names))]
        if level == "leaf"
        else [list(leaves) for leaves in ws.pod_leaves]
    )
    for leaves in domains:
        b = sum(ws.capacity_bound(req, leaf) for leaf in leaves)
        if b > best:
            best = b
            best_nodes = sum(
                len(lb[k])
                for leaf in leaves
                for m in ws.allowed_models(req)
                if (lb := ws.leaf_buckets.get((m, leaf))) is not None
                for k in range(req.gpus, ws.max_gpus + 1)
            )
    data.update(best_domain_workers=best)
    if level == "leaf":
        return Reason(
            ReasonCode.TOPOLOGY,
            f"needs {s.workers} × {_gpus(req.gpus)} under one leaf; the best leaf "
            f"has {best_nodes} node{'s' if best_nodes != 1 else ''} with "
            f"{_gpus(req.gpus)} free",
            data,
        )
    return Reason(
        ReasonCode.TOPOLOGY,
        f"needs {s.workers} × {_gpus(req.gpus)} under one {level}; no {level} "
        f"has that free now ({free} GPUs free in all)",
        data,
    )


def explain_all(
    snap: Snapshot,
    profile: Profile,
    usage: QueueUsage,
    ws: Workspace,
    res: CycleResult,
    examined: set[str],
    unplaced: list[PendingJob],
    waiting: list[PendingJob],
    head: PendingJob | None,
    rng: Random,
) -> None:
    """Step 6: a Reason for every pending job the cycle did not start (those it never reached
    worked out only when asked for), and the plan that estimates their starts."""
    started = set(res.started_ids)
    cycle_reasons = list(res.reasons)  # reasons the cycle gave (quota, preemption, held)
    why = _Explainer(snap, profile, usage, ws, res, rng)
    why.waiting(waiting)
    why.unplaced(unplaced, head)
    why.held_by_quota(cycle_reasons)
    skipped = started | examined
    res.reasons.defer(
        snap.pending, skipped.__contains__, _or_waiting(why.behind(head, len(examined)))
    )
    res.reasons.estimate_with(StartPlan(snap, profile, res))


def _or_waiting(rest: Callable[[PendingJob], Reason]) -> Callable[[PendingJob], Reason]:
    """``rest``, but a job waiting on a dependency or on its array's throttle is told that,
    worked out when asked for (``Reasons.defer``): a load of jobs held on a dependency would
    otherwise cost every pass a Reason each (issue 26: ten thousand of them, ten passes a
    second). Such a job is never examined, so nothing else explains it."""

    def reason(job: PendingJob) -> Reason:
        if job.waiting_for:
            code = ReasonCode.ARRAY_LIMIT if job.throttled else ReasonCode.DEPENDENCY
            if job.never_met:
                code = ReasonCode.DEP_NEVER
            if job.held:
                code = ReasonCode.HELD_ADMIN if job.held == "admin" else ReasonCode.HELD_USER
            return Reason(code, job.waiting_for, {"dependency": list(job.deps)} if job.deps else {})
        return rest(job)

    return reason


class _Explainer:
    """The reasons of one cycle, each worked out once per job shape where it depends on
    nothing else (the caches below); the probes place on copies with ``rng``."""

    def __init__(
        self,
        snap: Snapshot,
        profile: Profile,
        usage: QueueUsage,
        ws: Workspace,
        res: CycleResult,
        rng: Random,
    ) -> None:
        self.snap, self.profile, self.usage, self.ws, self.res = snap, profile, usage, ws, res
        self.rng = rng
        self.empty: Workspace | None = None
        self.never_cache: dict[Shape, Reason | None] = {}
        self.now_cache: dict[Shape, Reason] = {}
        self.unfenced_cache: dict[Shape, bool] = {}
        self.ask_all = not profile.admit.admits_unlimited

    def fits_unfenced(self, job: PendingJob) -> bool:
        k = shape_of(job.spec)
        if k not in self.unfenced_cache:
            probe = self.ws.copy()
            placed = place_gang(job.spec, probe, self.profile.place, self.rng)[0]
            self.unfenced_cache[k] = placed is not None
        return self.unfenced_cache[k]

    def never_admitted(self, job: PendingJob) -> Reason | None:
        status = admit_any(job, self.profile.admit, self.usage, self.ask_all)[1].status
        return status.reason if status.code is Code.UNRESOLVABLE else None

    def never(self, job: PendingJob) -> Reason | None:
        k = shape_of(job.spec)
        if k not in self.never_cache:
            if self.empty is None:
                self.empty = _empty_cluster(self.snap)
            probe = self.empty.copy()
            alloc, _ = place_gang(job.spec, probe, self.profile.place, self.rng)
            self.never_cache[k] = None if alloc is not None else never_reason(job, self.empty)
        return self.never_cache[k]

    def waiting(self, waiting: list[PendingJob]) -> None:
        """Jobs not yet eligible by their back-off (those waiting on a dependency or their
        array's throttle get theirs when asked for: ``_or_waiting``)."""
        for job in waiting:
            if not job.waiting_for:
                # a job that could not fit even on an empty cluster, or that its queue can
                # never admit, will not start once its back-off is over either: that is what
                # its user must hear (and it has no estimated start)
                self.res.reasons[job.id] = (
                    self.never(job)
                    or self.never_admitted(job)
                    or not_eligible(job.eligible_time, self.snap.now, job.spec.begin_time)
                )

    def unplaced(self, unplaced: list[PendingJob], head: PendingJob | None) -> None:
        """Jobs the cycle reached and could not place: never, the reservation, or resources.
        Apart from the reserved job, an unplaced job's reason is a function of its shape:
        worked out (through the caches, in the same order of calls) once per shape."""
        res, snap = self.res, self.snap
        reservation = res.reservation
        reserved_id = reservation.job_id if reservation is not None else None
        fenced_out: Reason | None = None  # the same for every job kept off the reservation
        by_shape: dict[Shape, Reason] = {}
        for job in unplaced:
            k = shape_of(job.spec)
            if job.id != reserved_id:
                r = by_shape.get(k)
                if r is not None:
                    res.reasons[job.id] = r
                    continue
            r = self.never_cache[k] if k in self.never_cache else self.never(job)
            if r is None:
                r = self.now_cache.get(k)
                if r is None:
                    r = self.now_cache[k] = resource_reason(job, self.ws)
                if reservation is not None and job.id == reservation.job_id:
                    res.reasons[job.id] = replace(
                        r,
                        estimated_start=reservation.start_time,
                        start_bound=RESERVED,
                        message=f"{r.message}; reserved to start in "
                        f"{in_words(reservation.start_time - snap.now)}",
                    )
                    continue
                if reservation is not None and head is not None and self.fits_unfenced(job):
                    # it would have fitted but for the fence around the reservation
                    if fenced_out is None:
                        fenced_out = Reason(
                            ReasonCode.RESERVED,
                            f"fits only on devices reserved for job {reservation.job_id} "
                            f"(it starts in {in_words(reservation.start_time - snap.now)}) "
                            "and would still be running then",
                            {"reserved_for": reservation.job_id},
                        )
                    r = fenced_out
            by_shape[k] = r
            res.reasons[job.id] = r

    def held_by_quota(self, cycle_reasons: list[str]) -> None:
        """A job held by quota that no cluster could ever hold is told so (NeverSchedulable);
        so is one held behind the head of a profile that does not backfill (it would wait for
        ever, the head's start would not help it). The others held by quota are told their
        queue's room as the cycle leaves it: the numbers the last admission of the cycle saw,
        and what the queues page shows. (Room only shrinks within a cycle, so a job refused
        earlier in it is refused by these numbers too.) Only the cycle's own reasons can be
        Quota ones; they are visited in the order they were given."""
        res = self.res
        had_reason = set(cycle_reasons)
        by_id: dict[str, PendingJob] | None = None
        final: dict[tuple[object, object], Reason | None] = {}
        for job_id in cycle_reasons:
            why = res.reasons[job_id]
            if why.code is not ReasonCode.QUOTA and why.code is not ReasonCode.HELD:
                continue
            if by_id is None:  # built only when some job is held by quota
                by_id = {p.id: p for p in self.snap.pending if p.id in had_reason}
            blocked = by_id.get(job_id)
            if blocked is None:
                continue
            never_here = self.never(blocked)
            if never_here is not None:
                res.reasons[job_id] = never_here
                continue
            if why.code is ReasonCode.HELD:
                continue
            k = (blocked.spec.queues or blocked.spec.queue, blocked.spec.total_resources)
            if k not in final:
                adm = admit_any(blocked, self.profile.admit, self.usage, self.ask_all)[1]
                final[k] = adm.status.reason
            now_why = final[k]
            if now_why is not None and now_why.code is ReasonCode.QUOTA:
                res.reasons[job_id] = now_why

    def behind(self, head: PendingJob | None, examined: int) -> Callable[[PendingJob], Reason]:
        """The reason of the jobs the cycle never reached: a reason per shape (never fits) or
        one reason for all, worked out when asked for (``Reasons.defer``). A Reason is
        immutable, so one object serves every job it describes. Their NeverSchedulable probes
        draw on a Random of their own, so an answer does not depend on which job was asked
        about first."""
        profile = self.profile
        passing = profile.backfill.backfill(head, head) if head is not None else None
        if passing is not None and passing.code is not Code.SUCCESS and passing.reason is not None:
            behind = passing.reason  # the same for every job behind the head
        else:
            behind = Reason(
                ReasonCode.PRIORITY,
                f"{examined} job{'s' if examined != 1 else ''} ahead in "
                f"{profile.names.get('order')} order "
                f"were considered first; capacity ran out before this one",
                {"ahead": examined},
            )

        def rest(job: PendingJob) -> Reason:
            k = shape_of(job.spec)
            if k not in self.never_cache:
                self.rng = Random(self.snap.cycle)
            r = self.never_cache[k] if k in self.never_cache else self.never(job)
            return behind if r is None else r

        return rest
