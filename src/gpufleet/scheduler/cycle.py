"""One scheduling cycle over one snapshot, in the six numbered steps of DESIGN.md.

Pure: no I/O, no clock (``snap.now`` is the time), no threads. The same snapshot and profile
give the same decisions.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import chain, groupby
from operator import itemgetter
from random import Random

from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import MILLI
from gpufleet.scheduler import explain
from gpufleet.scheduler.admission import admit_any
from gpufleet.scheduler.decisions import CycleResult, Preempt, Reservation, Start
from gpufleet.scheduler.framework import ADMITTED, Admission, Code, Profile
from gpufleet.scheduler.gang import levels_for, place_gang
from gpufleet.scheduler.request import Shape, WorkerRequest, shape_of
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage
from gpufleet.scheduler.victims import fewest_victims
from gpufleet.scheduler.workspace import Workspace, _full

MAX_PREEMPTORS_PER_CYCLE = 4
MAX_RESERVATION_TRIES = 64


def run_cycle(snap: Snapshot, profile: Profile) -> CycleResult:
    res = CycleResult(snap.cycle, snap.now)
    ws = snap.workspace.copy() if snap.workspace is not None else Workspace(snap.nodes)
    usage = QueueUsage.of(snap)
    rng = Random(profile.seed * 1_000_003 + snap.cycle)
    profile.place.prepare(snap, ws)
    started: list[tuple[PendingJob, Allocation]] = []
    failed_shapes: set[tuple[Shape, bool]] = set()  # capacity only shrinks within a cycle
    victims_taken: set[str] = set()
    preempt_memo = _PreemptMemo()
    preemptors = 0
    head: PendingJob | None = None
    examined: set[str] = set()
    quota_blocked: dict[str, Admission] = {}
    unplaced: list[PendingJob] = []
    whole_only = True  # every pending job wants whole GPUs (so a full cluster ends the walk)
    waiting: list[PendingJob] = []
    eligible: Sequence[PendingJob]
    now = snap.now
    index = snap.pending_index
    if index is not None and index.ready and now >= 0:
        whole_only = index.whole_only
        eligible = snap.pending  # every job is eligible: no need to look at each
    else:
        ready: list[PendingJob] = []
        for p in snap.pending:
            if whole_only:
                s = p.spec
                whole_only = s.gpus_per_worker > 0 and s.gpu_milli >= MILLI
            if p.waiting_for or p.eligible_time > now:
                waiting.append(p)
            else:
                ready.append(p)
        eligible = ready

    def place(job: PendingJob, adm: Admission) -> bool:
        """Steps 3 and 4 for one admitted job: start it, or leave it unplaced."""
        s = job.spec
        if (
            s.gpus_per_worker
            and s.gpu_milli >= MILLI
            and s.workers * s.gpus_per_worker > ws.free_full
        ):
            # place_gang's own first test (no state, no random number), without the shape key:
            # a full cluster sends most jobs here, and free devices only go within a cycle
            # (the walk below makes the same test before it calls this)
            return False
        limit = s.time_limit_s
        long = res.reservation is not None and (
            limit is None or snap.now + limit > res.reservation.start_time
        )
        ws.fence = long  # long jobs keep off the head's reserved devices, CPUs and memory
        key = (shape_of(job.spec), long)
        alloc = None
        if key not in failed_shapes:
            alloc, _ = place_gang(job.spec, ws, profile.place, rng)
            if alloc is None:
                failed_shapes.add(key)
        ws.fence = False
        if alloc is None:
            return False
        res.starts.append(Start(job.id, alloc, adm.borrowing, s.queue))
        usage.add(job.spec.queue, job.spec.total_resources)
        started.append((job, alloc))
        return True

    # 1. order: jobs nominated by an earlier preemption first (the room was made for them)
    rest: Iterable[PendingJob]
    if index is None or index.nominated:
        nominated = [p for p in eligible if p.nominated]
        rest = (p for p in profile.order.order(eligible, snap, usage) if not p.nominated)
    else:  # none is nominated (the index counts them): no filter per job walked
        nominated = []
        rest = profile.order.order(eligible, snap, usage)
    # Jobs that could start only by borrowing wait until every job that fits its own quota had
    # its turn (as in Kueue): else a reclaimed borrower, requeued ahead in order, would take
    # back the very GPUs its lender just had freed, over and over.
    borrowers: list[PendingJob] = []
    never = _NeverFits()
    # queues whose jobs need the admit plugin asked (all, unless it says otherwise)
    admit_all = not getattr(profile.admit, "admits_unlimited", False)
    limited = usage.limited
    # read once: the walk below runs per examined job, a hundred or more a cycle when full
    max_depth, backfills = profile.max_depth, profile.backfill.backfills
    preempts = bool(profile.preempt)
    # the one preempt plugin's victims_key, asked here first: a job whose key is known to have
    # no candidates left (``none_for``) skips step 5 (a full LAS cluster sends most jobs there,
    # and those of its last level outrank nobody)
    one_key = _keyers(profile, preempt_memo)[0] if len(profile.preempt) == 1 else None
    none_for = preempt_memo.none_for
    order = profile.order
    for job in chain(nominated, rest):
        if max_depth and len(examined) >= max_depth:
            break
        if head is not None and whole_only and ws.free_full == 0:
            break  # nothing left to place: the rest wait for resources
        examined.add(job.id)

        # 2. admit (a job of several queues: as the job of the first that admits it)
        if job.spec.queues:
            job, adm = admit_any(job, profile.admit, usage, admit_all)
        elif not admit_all and job.spec.queue not in limited:
            adm = ADMITTED
        else:
            adm = profile.admit.admit(job, usage)
        if adm is not ADMITTED and adm.status.code is not Code.SUCCESS:  # runs per job
            quota_blocked[job.id] = adm
            if adm.status.reason is not None:
                res.reasons[job.id] = adm.status.reason
            continue
        if head is not None and not backfills:
            res.reasons[job.id] = explain.held(job, head)
            break  # strict order: nothing passes the blocked head
        if adm.borrowing:
            borrowers.append(job)
            continue

        # 3. place (4. backfill); place's own first test first, without a call
        s = job.spec
        if not (
            s.gpus_per_worker
            and s.gpu_milli >= MILLI
            and s.workers * s.gpus_per_worker > ws.free_full
        ) and place(job, adm):
            continue

        # 5. preempt
        if (
            preempts
            and preemptors < MAX_PREEMPTORS_PER_CYCLE
            and (one_key is None or one_key(job, adm, snap, usage, order) not in none_for)
        ):
            chosen = _preempt(job, adm, snap, usage, ws, profile, rng, victims_taken, preempt_memo)
            if chosen:
                preemptors += 1
                for v in chosen:
                    victims_taken.add(v.id)
                    res.preemptions.append(Preempt(v.id, job.id, _why(v, job, usage)))
                res.reasons[job.id] = explain.preempting(job, chosen)
                _hold_for(job, chosen, ws, profile, rng)
                if head is None:
                    head = job
                continue

        unplaced.append(job)
        if head is None and not _never_fits(job, snap, profile, never):
            head = job
            if profile.backfill.reserves:
                res.reservation = _reserve(job, ws, snap, started, profile, rng)

    # 3'. the borrowers, in order, with what is left
    for job in borrowers:
        # the cohort's idle quota may be gone by now (a job of several queues: another may lend)
        if job.spec.queues:
            job, adm = admit_any(job, profile.admit, usage, admit_all)
        else:
            adm = profile.admit.admit(job, usage)
        if not adm.status.ok:
            quota_blocked[job.id] = adm
            if adm.status.reason is not None:
                res.reasons[job.id] = adm.status.reason
        elif head is not None and not profile.backfill.backfills:
            res.reasons[job.id] = explain.held(job, head)
        elif not place(job, adm):
            unplaced.append(job)

    res.examined = len(examined)
    res.free_whole_gpus = ws.free_full
    # 6. explain
    if profile.explain:
        explain.explain_all(snap, profile, usage, ws, res, examined, unplaced, waiting, head, rng)
    return res


def _reserve(
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
    assumed: float | None = getattr(profile.backfill, "assume_limit_s", None)
    ends = _ends(snap, assumed, started)
    req = WorkerRequest.of(job.spec)
    if _first_fit_gang(job.spec, req, profile, ws):
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
    """``_reserve`` the plain way: release on a copy of ``ws``, try to place at each step."""
    sim = ws.copy()
    spec = job.spec
    need = req.gpus * spec.workers
    tries = 0
    for t, group in groupby(ends, key=_FIRST):
        for _, alloc in group:
            _release(sim, alloc)
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
    """``_reserve_scan`` for a ``_first_fit_gang``, with the same answer, worked out on free
    counts: per node its free devices, in all how many GPUs and workers fit. A step where the
    gang does not fit changes nothing (no room) or reverses buckets (``_failed_try``); the
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
                k = _full(gfree[n])
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
                        _failed_try(sim, req)
                    else:
                        _release(sim, step)
                placed, _ = place_gang(spec, sim, profile.place, rng)
                if placed is None:  # cannot be (see _first_fit_gang); the plain way, then
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


_FIRST = itemgetter(0)


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
            (end, r.allocation) for r in snap.running if (end := _end_of(r, assumed)) is not None
        ]
    for job_started, alloc in started:
        if job_started.spec.time_limit_s is not None:
            ends.append((snap.now + job_started.spec.time_limit_s, alloc))
    ends.sort(key=_FIRST)
    return ends


def _first_fit_gang(
    spec: JobSpec,
    req: WorkerRequest,
    profile: Profile,
    ws: Workspace,
    hosts_ok: bool | None = None,
) -> bool:
    """Whether ``place_gang(spec, ws')`` is known in advance for the workspaces ``ws'`` that
    ``_reserve`` makes from ``ws`` (by releasing; no fence): it succeeds exactly when
    the workers that fit on free whole GPUs (their room) are at least ``spec.workers``, and
    ``_failed_try`` is what a failure leaves behind.

    So when the workers want whole GPUs and nothing else (no CPU, memory or dataset; no node
    over-committed), the gang may end up anywhere (then every tighter level's domains need
    that capacity), and the plugin takes the first candidate (``first_fit``: as ``tightest``
    does, drawing no random number, keeping no state). ``hosts_ok``: ``_hosts_ok(ws)``, when
    the caller knows it."""
    return (
        req.whole
        and req.gpus > 0
        and req.select is None
        and req.cpu_milli == 0
        and req.memory_mib == 0
        and not req.dataset
        and bool(getattr(profile.place, "first_fit", False))
        and levels_for(spec, profile.place.prefers_topology)[-1] == "any"
        and (_hosts_ok(ws) if hosts_ok is None else hosts_ok)
    )


def _hosts_ok(ws: Workspace) -> bool:
    """No node over-committed in CPU or memory. In a cycle's workspace this stays as it was:
    a worker is assigned only where its CPU and memory fit, and what a failed gang took is
    given back."""
    return min(ws.cpu, default=0) >= 0 and min(ws.mem, default=0) >= 0


def _failed_try(ws: Workspace, req: WorkerRequest) -> None:
    """What a ``place_gang`` of a ``_first_fit_gang`` leaves behind when only some workers fit.

    ``place_in`` anywhere takes the first candidate node again and again: the first node of the
    tightest bucket, until it has fewer than ``req.gpus`` free; then the next; so it drains
    every node with room, in bucket order, before it finds no room and gives them back in
    reverse. Each node ends in its own bucket again, put last: every bucket with room ends
    reversed. (The partly used sets are reordered too, but only fractional requests read
    them, and ``_reserve`` places nothing else in this workspace.)"""
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


def _end_of(r: RunningJob, assumed: float | None) -> float | None:
    """When a running job will have ended at the latest: its time limit, else the assumed one."""
    if r.expected_end is not None:
        return r.expected_end
    return None if assumed is None else r.start_time + assumed


class _PreemptMemo:
    """What ``_preempt`` learns in one cycle and may reuse in it: the victim lists by (preempt
    plugin, its ``victims_key``), and the first-fit gangs (by those keys and their shape) that
    all their candidates could not make room for. Within a cycle free capacity only shrinks
    (starts, holds) and candidates only go (taken), so such a gang finds no room again."""

    def __init__(self) -> None:
        self.lists: dict[tuple[int, Hashable], list[RunningJob]] = {}
        self.no_room: set[tuple[Hashable, Shape]] = set()
        self.hosts_ok: bool | None = None  # _hosts_ok of the cycle's workspace, once known
        self.keyers: list[Callable[..., Hashable | None] | None] | None = None  # victims_key's
        # the candidates by all plugins' keys, with len(taken) then (taken only grows)
        self.cands: dict[tuple[Hashable, ...], tuple[int, list[RunningJob]]] = {}
        # with one plugin, the keys whose candidates ran out (they only go: they stay out)
        self.none_for: set[Hashable] = set()


def _keyers(
    profile: Profile, memo: _PreemptMemo | None
) -> list[Callable[..., Hashable | None] | None]:
    """Each preempt plugin's ``victims_key``, if it has one (once per cycle with ``memo``)."""
    if memo is None:
        return [getattr(plugin, "victims_key", None) for plugin in profile.preempt]
    if memo.keyers is None:
        memo.keyers = [getattr(plugin, "victims_key", None) for plugin in profile.preempt]
    return memo.keyers


def _victims_of(
    k: int,
    key: Hashable | None,
    job: PendingJob,
    adm: Admission,
    snap: Snapshot,
    usage: QueueUsage,
    profile: Profile,
    memo: _PreemptMemo | None,
) -> list[RunningJob]:
    """``profile.preempt[k].victims(...)``, asked once per key in a cycle (each call walks
    every running job, and a full cluster sends most examined jobs here)."""
    plugin = profile.preempt[k]
    if key is None or memo is None:
        return plugin.victims(job, adm, snap, usage, profile.order)
    found = memo.lists.get((k, key))
    if found is None:
        found = memo.lists[(k, key)] = plugin.victims(job, adm, snap, usage, profile.order)
    return found


def _candidates(
    keys: list[Hashable | None],
    job: PendingJob,
    adm: Admission,
    snap: Snapshot,
    usage: QueueUsage,
    profile: Profile,
    taken: set[str],
    memo: _PreemptMemo | None,
) -> list[RunningJob]:
    """Every plugin's victims for ``job``, in plugin order, once each, less those taken and
    those not preemptible."""
    if len(keys) == 1:  # one plugin, whose list (as the built-in ones) names each job once
        found = _victims_of(0, keys[0], job, adm, snap, usage, profile, memo)
        if not taken:
            out = [v for v in found if v.spec.preemptible]
        else:
            out = [v for v in found if v.id not in taken and v.spec.preemptible]
        if len({v.id for v in out}) == len(out):
            return out
    seen: set[str] = set()
    cands: list[RunningJob] = []
    for k in range(len(profile.preempt)):
        for v in _victims_of(k, keys[k], job, adm, snap, usage, profile, memo):
            if v.id not in seen and v.id not in taken and v.spec.preemptible:
                seen.add(v.id)
                cands.append(v)
    return cands


def _preempt(
    job: PendingJob,
    adm: Admission,
    snap: Snapshot,
    usage: QueueUsage,
    ws: Workspace,
    profile: Profile,
    rng: Random,
    taken: set[str],
    memo: _PreemptMemo | None = None,
) -> list[RunningJob]:
    """The fewest victims, cheapest first, whose stopping lets ``job`` start; [] if none do."""
    keyers = _keyers(profile, memo)
    order = profile.order
    if len(keyers) == 1:  # the usual profile, asked per job a full cluster sends here
        keyer = keyers[0]
        keys: list[Hashable | None] = [
            None if keyer is None else keyer(job, adm, snap, usage, order)
        ]
    else:
        keys = [None if k is None else k(job, adm, snap, usage, order) for k in keyers]
    s = job.spec
    gang: tuple[Hashable, Shape] | None = None
    if memo is not None and None not in keys:
        # most jobs a full cluster sends here have the candidates of an earlier one (LAS: a job
        # of the top level has none): the list once per keys until a victim is taken
        all_keys = tuple(keys)
        known = memo.cands.get(all_keys)
        if known is not None and known[0] == len(taken):
            cands = known[1]
        else:
            cands = _candidates(keys, job, adm, snap, usage, profile, taken, memo)
            memo.cands[all_keys] = (len(taken), cands)
        if not cands:
            if len(keys) == 1:
                memo.none_for.add(keys[0])
            return []
        # the job's shape decides (in this cycle) whether it is a first-fit gang, and its room
        gang = (all_keys, shape_of(s))
        if gang in memo.no_room:
            return []
    else:
        cands = _candidates(keys, job, adm, snap, usage, profile, taken, memo)
        if not cands:
            return []
    req = WorkerRequest.of(s)
    if memo is not None and memo.hosts_ok is None:
        memo.hosts_ok = _hosts_ok(ws)
    first_fit = _first_fit_gang(s, req, profile, ws, None if memo is None else memo.hosts_ok)
    if not first_fit:
        return _preempt_scan(job, cands, snap, ws, profile, rng)
    chosen = fewest_victims(req, s.workers, cands, ws, snap.now)  # the scan's answer
    if not chosen and gang is not None and memo is not None:
        memo.no_room.add(gang)
    return chosen


def _preempt_scan(
    job: PendingJob,
    cands: list[RunningJob],
    snap: Snapshot,
    ws: Workspace,
    profile: Profile,
    rng: Random,
) -> list[RunningJob]:
    """``_preempt`` the plain way: release the candidates in order on a copy of ``ws``, a real
    placement (on another copy) after each, until ``job`` fits; then the reprieve."""
    sim = ws.copy()
    chosen: list[RunningJob] = []
    fits = False
    for v in cands:
        _release(sim, v.allocation)
        chosen.append(v)
        probe = sim.copy()
        alloc, _ = place_gang(job.spec, probe, profile.place, rng)
        if alloc is not None:
            fits = True
            break
    if not fits:
        return []
    # reprieve: keep any victim whose stopping turns out not to be needed, dearest first
    for v in sorted(chosen[:-1], key=lambda r: -r.lost_work(snap.now)):
        trial = ws.copy()
        for other in chosen:
            if other is not v:
                _release(trial, other.allocation)
        alloc, _ = place_gang(job.spec, trial, profile.place, rng)
        if alloc is not None:
            chosen.remove(v)
    return chosen


def _hold_for(
    job: PendingJob, victims: list[RunningJob], ws: Workspace, profile: Profile, rng: Random
) -> None:
    """Keep the nodes ``job`` will start on once its victims stop out of the rest of this cycle:
    else a later job backfills their free GPUs and, as LAS does, the victims and that job can
    preempt each other at one instant forever."""
    trial = ws.copy()
    for v in victims:
        _release(trial, v.allocation)
    plan, _ = place_gang(job.spec, trial, profile.place, rng)
    for p in plan or ():
        i = ws.by_name.get(p.node)
        if i is not None:
            ws.hold(i)


class _NeverFits:
    """``_never_fits``'s answers in one cycle, per job shape (the answer depends on nothing
    else), and the empty cluster its probes copy."""

    def __init__(self) -> None:
        self.known: dict[Shape, bool] = {}
        self.empty: Workspace | None = None


def _never_fits(
    job: PendingJob, snap: Snapshot, profile: Profile, memo: _NeverFits | None = None
) -> bool:
    """Whether ``job`` fits nowhere even on the empty cluster (NeverSchedulable). Such a job
    must not become the head: it would hold a strict order, or EASY's one reservation, forever.
    Cheap when whole empty nodes could obviously hold it; else a probe of the empty cluster.
    With ``memo`` (one per cycle), each shape is worked out once."""
    if memo is None:
        return _never_fits_now(job, snap, profile, None)
    key = shape_of(job.spec)
    answer = memo.known.get(key)
    if answer is None:
        answer = memo.known[key] = _never_fits_now(job, snap, profile, memo)
    return answer


def _never_fits_now(
    job: PendingJob, snap: Snapshot, profile: Profile, memo: _NeverFits | None
) -> bool:
    s = job.spec
    if (s.workers == 1 or not s.topology.required) and not s.selects_nodes:
        room = 0
        for n in snap.nodes:
            if n.schedulable and (not s.gpu_models or n.gpu_model in s.gpu_models):
                room += min(
                    n.gpus // s.gpus_per_worker if s.gpus_per_worker else s.workers,
                    n.cpu_total // s.cpu_milli if s.cpu_milli else s.workers,
                    n.mem_total // s.memory_mib if s.memory_mib else s.workers,
                )
                if room >= s.workers:
                    return False
    if memo is None:
        probe = explain._empty_cluster(snap)
    else:
        if memo.empty is None:
            memo.empty = explain._empty_cluster(snap)
        probe = memo.empty.copy()  # the same as a fresh one: the probe changes it
    return place_gang(s, probe, profile.place, Random(snap.cycle))[0] is None


def _release(ws: Workspace, alloc: Allocation) -> None:
    for p in alloc:
        i = ws.by_name.get(p.node)
        if i is not None:
            ws.release(i, p)


def _why(victim: RunningJob, job: PendingJob, usage: QueueUsage) -> str:
    if usage.borrowing(victim.spec.queue) and victim.spec.queue != job.spec.queue:
        return f"reclaim: queue {victim.spec.queue} is over its quota; {job.spec.queue} needs it"
    if victim.spec.priority < job.spec.priority:
        return f"priority {job.spec.priority} of job {job.id} over {victim.spec.priority}"
    return f"job {job.id} outranks it in the order"


__all__ = ["Reason", "ReasonCode", "run_cycle"]
