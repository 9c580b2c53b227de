"""Step 4, backfill: the reservation of the head of the order, the job that could not start.

EASY backfill's shadow time: running jobs are released by their expected end (time limit)
until the blocked job fits; later jobs must not delay it (the cycle fences the devices, CPUs and
memory it keeps). Whether a later job may pass the head at all is the backfill plugin's answer
(``BackfillPlugin.backfill``); this module works out the reservation when the plugin
``reserves``.
"""

from __future__ import annotations

import bisect
from itertools import groupby
from operator import itemgetter
from random import Random

from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.decisions import Reservation
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.free_counts import full_count
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.whatif import first_fit_gang, release
from gpufleet.scheduler.workspace import Workspace

MAX_RESERVATION_TRIES = 64

_FIRST = itemgetter(0)


def reserve(
    job: PendingJob,
    ws: Workspace,
    snap: Snapshot,
    started: list[tuple[PendingJob, Allocation]],
    profile: Profile,
    rng: Random,
) -> Reservation | None:
    """EASY backfill's shadow time: release running jobs by their expected end (time limit)
    until the blocked job fits; a job with no time limit never frees its devices here, unless
    the backfill plugin assumes one."""
    ends = _ends(snap, profile.backfill.assume_limit_s, started)
    req = WorkerRequest.of(job.spec)
    if first_fit_gang(job.spec, req, profile.place, ws):
        return _reserve_first_fit(job, req, ws, snap, ends, profile, rng)
    return _reserve_scan(job, req, ws, snap, ends, profile, rng)


def _reserve_scan(
    job: PendingJob,
    req: WorkerRequest,
    ws: Workspace,
    snap: Snapshot,
    ends: list[tuple[float, Allocation]],
    profile: Profile,
    rng: Random,
) -> Reservation | None:
    """``reserve`` the plain way: release on a copy of ``ws``, try to place at each step."""
    sim = ws.copy()
    spec = job.spec
    need = req.gpus * spec.workers
    tries = 0
    for t, group in groupby(ends, key=_FIRST):
        for _, alloc in group:
            release(sim, alloc)
        if req.whole and sim.free_gpus(req) < need:
            continue
        before = (list(sim.full), list(sim.cpu), list(sim.mem))
        found, _ = place_gang(spec, sim, profile.place, rng)
        tries += 1
        if found is not None:
            _keep(ws, found, before)
            return Reservation(job.id, max(t, snap.now), found)
        if tries >= MAX_RESERVATION_TRIES:
            break
    return None


def _reserve_first_fit(
    job: PendingJob,
    req: WorkerRequest,
    ws: Workspace,
    snap: Snapshot,
    ends: list[tuple[float, Allocation]],
    profile: Profile,
    rng: Random,
) -> Reservation | None:
    """``_reserve_scan`` for a ``first_fit_gang``, with the same answer, worked out on free
    counts: per node its free devices, in all how many GPUs and workers fit. A step where the
    gang does not fit changes nothing (no room) or reverses buckets (``failed_try``); the
    first where it fits is the answer. A single worker takes the first candidate, found from
    the counts and the order the releases left; a gang is placed for real, on a copy of ``ws``
    that replays the releases and failed tries up to there."""
    spec = job.spec
    g, workers = req.gpus, spec.workers
    need = g * workers
    by_name = ws.by_name
    gfree, full, cpu, mem = list(ws.gfree), list(ws.full), list(ws.cpu), list(ws.mem)
    models = ws.allowed_models(req)
    allowed = set(models)
    ok, model = ws.ok, ws.model
    free = room = 0  # over the indexed nodes of allowed models, as free_gpus counts
    for m in models:
        free += ws.model_free[m]
        for k, bucket in enumerate(ws.buckets[m]):
            room += len(bucket) * (k // g)
    moved: dict[int, int] = {}  # node → when a release last moved it (last in its bucket)
    steps: list[Allocation | None] = []  # the releases and (None) failed tries, in order
    tries = stamp = 0
    for t, group in groupby(ends, key=_FIRST):
        for _, alloc in group:
            steps.append(alloc)
            for p in alloc:
                n = by_name.get(p.node)
                if n is None:
                    continue
                devs = list(gfree[n])
                for d in p.gpus:
                    devs[d] += p.gpu_milli
                gfree[n] = tuple(devs)
                k = full_count(gfree[n])
                if ok[n] and model[n] in allowed and devs:  # indexed, of an allowed model
                    free += k - full[n]
                    room += k // g - full[n] // g
                full[n] = k
                cpu[n] += p.cpu_milli
                mem[n] += p.memory_mib
                moved[n] = stamp
                stamp += 1
        if free < need:
            continue
        tries += 1
        if room >= workers:
            if workers == 1:
                i = _first_candidate(ws, req, full, moved)
                devices = tuple([d for d, f in enumerate(gfree[i]) if f >= MILLI][:g])
                found: Allocation = (Placement(ws.views[i].name, devices, req.gpu_milli, 0, 0),)
            else:
                sim = ws.copy()
                for step in steps:
                    if step is None:
                        failed_try(sim, req)
                    else:
                        release(sim, step)
                placed, _ = place_gang(spec, sim, profile.place, rng)
                if placed is None:  # cannot be (see first_fit_gang); the plain way, then
                    return _reserve_scan(job, req, ws, snap, ends, profile, rng)
                found = placed
            _keep(ws, found, (full, cpu, mem))
            return Reservation(job.id, max(t, snap.now), found)
        if room:
            steps.append(None)
        if tries >= MAX_RESERVATION_TRIES:
            break
    return None


def _first_candidate(
    ws: Workspace, req: WorkerRequest, full: list[int], moved: dict[int, int]
) -> int:
    """The node ``tightest`` takes for ``req`` anywhere in ``ws`` after releases that changed
    free counts to ``full`` and moved the nodes in ``moved``: the first node of the tightest
    bucket with room, models in order. In a bucket, the nodes no release moved keep their
    order, ahead of those moved there, which follow in the order they were last moved."""
    models = ws.allowed_models(req)
    for k in range(req.gpus, ws.max_gpus + 1):
        for m in models:
            for i in ws.buckets[m][k]:
                if i not in moved:
                    return i
            last = [
                (when, i)
                for i, when in moved.items()
                if full[i] == k and ws.model[i] == m and ws.ok[i] and ws.gfree[i]
            ]
            if last:
                return min(last)[1]
    raise AssertionError("no node has room")  # the caller counted room on one


def _keep(
    ws: Workspace,
    found: Allocation,
    before: tuple[list[int], list[int], list[int]],
) -> None:
    """Keep free now, on each node of the reservation, what the head takes there at its start
    less what running jobs free there by then (``before``: free devices, CPU and memory then)."""
    need_at: dict[int, list[int]] = {}
    for placement in found:
        i = ws.by_name[placement.node]
        acc = need_at.setdefault(i, [0, 0, 0])
        acc[0] += len(placement.gpus) if placement.gpu_milli >= MILLI else 0
        acc[1] += placement.cpu_milli
        acc[2] += placement.memory_mib
    full_t, cpu_t, mem_t = before
    for i, (gpus, cpu, mem) in need_at.items():
        keep_gpus = gpus - max(0, full_t[i] - ws.full[i])
        keep_cpu = cpu - max(0, cpu_t[i] - ws.cpu[i])
        keep_mem = mem - max(0, mem_t[i] - ws.mem[i])
        if keep_gpus > 0:
            ws.reserved[i] = ws.reserved.get(i, 0) + keep_gpus
        if keep_cpu > 0:
            ws.reserved_cpu[i] = ws.reserved_cpu.get(i, 0) + keep_cpu
        if keep_mem > 0:
            ws.reserved_mem[i] = ws.reserved_mem.get(i, 0) + keep_mem


def _ends(
    snap: Snapshot, assumed: float | None, started: list[tuple[PendingJob, Allocation]]
) -> list[tuple[float, Allocation]]:
    """(end, allocation) of every job that ends (running, then started this cycle), stably
    sorted by end."""
    if assumed is None and snap.ends is not None:
        ends = list(snap.ends)  # the running jobs' already, in this order
        for job_started, alloc in started:
            limit = job_started.spec.time_limit_s
            if limit is not None:
                bisect.insort_right(ends, (snap.now + limit, alloc), key=_FIRST)  # after equals
        return ends
    if assumed is None:
        ends = [
            (r.start_time + limit, r.allocation)
            for r in snap.running
            if (limit := r.spec.time_limit_s) is not None
        ]
    else:
        ends = [
            (end, r.allocation) for r in snap.running if (end := end_of(r, assumed)) is not None
        ]
    for job_started, alloc in started:
        if job_started.spec.time_limit_s is not None:
            ends.append((snap.now + job_started.spec.time_limit_s, alloc))
    ends.sort(key=_FIRST)
    return ends


def failed_try(ws: Workspace, req: WorkerRequest) -> None:
    """What a ``place_gang`` of a ``first_fit_gang`` leaves behind when only some workers fit.

    ``place_in`` anywhere takes the first candidate node again and again: the first node of the
    tightest bucket, until it has fewer than ``req.gpus`` free; then the next; so it drains
    every node with room, in bucket order, before it finds no room and gives them back in
    reverse. Each node ends in its own bucket again, put last: every bucket with room ends
    reversed. (The partly used sets are reordered too, but only fractional requests read
    them, and ``reserve`` places nothing else in this workspace.)"""
    g = req.gpus
    for m in ws.allowed_models(req):
        bs = ws.buckets[m]
        for k in range(g, len(bs)):
            if len(bs[k]) > 1:
                bs[k] = dict.fromkeys(reversed(bs[k]))
        for leaf in range(len(ws.leaf_names)):
            lb = ws.leaf_buckets.get((m, leaf))
            if lb is not None:
                for k in range(g, len(lb)):
                    if len(lb[k]) > 1:
                        lb[k] = dict.fromkeys(reversed(lb[k]))


def end_of(r: RunningJob, assumed: float | None) -> float | None:
    """When a running job will have ended at the latest: its time limit, else the assumed one."""
    if r.expected_end is not None:
        return r.expected_end
    return None if assumed is None else r.start_time + assumed
