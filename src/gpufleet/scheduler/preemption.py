"""Step 5, preemption: the fewest running jobs, cheapest first, whose stopping lets a job start.

The preempt plugins name the candidates (``PreemptPlugin.victims``); this module merges them,
remembers within a cycle what it learnt (victim lists per ``victims_key``, gangs that found no
room), finds the fewest victims (on free counts for a first-fit gang, else by placing on copies
of the workspace) and keeps the preemptor's nodes for it for the rest of the cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from random import Random

from gpufleet.scheduler.framework import Admission, Profile
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.request import Shape, WorkerRequest, shape_of
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage
from gpufleet.scheduler.victims import fewest_victims
from gpufleet.scheduler.whatif import first_fit_gang, hosts_ok_in, release
from gpufleet.scheduler.workspace import Workspace


class PreemptMemo:
    """What ``preempt`` learns in one cycle and may reuse in it: the victim lists by (preempt
    plugin, its ``victims_key``), and the first-fit gangs (by those keys and their shape) that
    all their candidates could not make room for. Within a cycle free capacity only shrinks
    (starts, holds) and candidates only go (taken), so such a gang finds no room again."""

    def __init__(self) -> None:
        self.lists: dict[tuple[int, Hashable], Sequence[RunningJob]] = {}
        self.no_room: set[tuple[Hashable, Shape]] = set()
        self.hosts_ok: bool | None = None  # hosts_ok_in of the cycle's workspace, once known
        self.keyers: list[Callable[..., Hashable | None]] | None = None  # victims_key's
        # the candidates by all plugins' keys, with len(taken) then (taken only grows)
        self.cands: dict[tuple[Hashable, ...], tuple[int, list[RunningJob]]] = {}
        # with one plugin, the keys whose candidates ran out (they only go: they stay out)
        self.none_for: set[Hashable] = set()
        self.going: list[RunningJob] | None = None  # the running jobs stopping, once known


def going(snap: Snapshot, memo: PreemptMemo | None) -> list[RunningJob]:
    """The running jobs whose stop is under way (a victim in its notice's wait): no victims
    again, and their devices are the room being made (once per cycle with ``memo``)."""
    if memo is not None and memo.going is not None:
        return memo.going
    found = [r for r in snap.running if r.stopping_since is not None]
    if memo is not None:
        memo.going = found
    return found


def victims_keys(
    profile: Profile, memo: PreemptMemo | None
) -> list[Callable[..., Hashable | None]]:
    """Each preempt plugin's ``victims_key`` (once per cycle with ``memo``)."""
    if memo is None:
        return [plugin.victims_key for plugin in profile.preempt]
    if memo.keyers is None:
        memo.keyers = [plugin.victims_key for plugin in profile.preempt]
    return memo.keyers


def _victims_of(
    k: int,
    key: Hashable | None,
    job: PendingJob,
    adm: Admission,
    snap: Snapshot,
    usage: QueueUsage,
    profile: Profile,
    memo: PreemptMemo | None,
) -> Sequence[RunningJob]:
    """``profile.preempt[k].victims(...)``, asked once per key in a cycle (each call walks
    every running job, and a full cluster sends most examined jobs here)."""
    plugin = profile.preempt[k]
    if key is None or memo is None:
        return plugin.victims(job, adm, snap, usage, profile.order).jobs
    found = memo.lists.get((k, key))
    if found is None:
        found = memo.lists[(k, key)] = plugin.victims(job, adm, snap, usage, profile.order).jobs
    return found


def _candidates(
    keys: list[Hashable | None],
    job: PendingJob,
    adm: Admission,
    snap: Snapshot,
    usage: QueueUsage,
    profile: Profile,
    taken: set[str],
    memo: PreemptMemo | None,
) -> list[RunningJob]:
    """Every plugin's victims for ``job``, in plugin order, once each, less those taken and
    those not preemptible (or not yet: inside their ``min_runtime_s``)."""
    now = snap.now
    if len(keys) == 1:  # one plugin, whose list (as the built-in ones) names each job once
        found = _victims_of(0, keys[0], job, adm, snap, usage, profile, memo)
        if not taken:
            out = [v for v in found if v.spec.preemptible and not v.protected(now)]
        else:
            out = [
                v
                for v in found
                if v.id not in taken and v.spec.preemptible and not v.protected(now)
            ]
        if len({v.id for v in out}) == len(out):
            return out
    seen: set[str] = set()
    cands: list[RunningJob] = []
    for k in range(len(profile.preempt)):
        for v in _victims_of(k, keys[k], job, adm, snap, usage, profile, memo):
            if v.id not in seen and v.id not in taken and v.spec.preemptible:
                if v.protected(now):
                    continue
                seen.add(v.id)
                cands.append(v)
    return cands


def preempt(
    job: PendingJob,
    adm: Admission,
    snap: Snapshot,
    usage: QueueUsage,
    ws: Workspace,
    profile: Profile,
    rng: Random,
    taken: set[str],
    memo: PreemptMemo | None = None,
) -> list[RunningJob]:
    """The fewest victims, cheapest first, whose stopping lets ``job`` start; [] if none do."""
    keyers = victims_keys(profile, memo)
    order = profile.order
    if len(keyers) == 1:  # the usual profile, asked per job a full cluster sends here
        keys: list[Hashable | None] = [keyers[0](job, adm, snap, usage, order)]
    else:
        keys = [k(job, adm, snap, usage, order) for k in keyers]
    s = job.spec
    if stopping := going(snap, memo):
        # the room being made (a victim in its notice's wait holds its devices until it
        # exits): a job it lets start waits for it, and no one else is stopped for it
        ws = ws.copy()
        for r in stopping:
            release(ws, r.allocation)
        if place_gang(s, ws.copy(), profile.place, rng)[0] is not None:
            return []
        taken = taken | {r.id for r in stopping}
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
        memo.hosts_ok = hosts_ok_in(ws)
    first_fit = first_fit_gang(s, req, profile.place, ws, None if memo is None else memo.hosts_ok)
    if not first_fit:
        return preempt_scan(job, cands, snap, ws, profile, rng)
    chosen = fewest_victims(req, s.workers, cands, ws, snap.now)  # the scan's answer
    if not chosen and gang is not None and memo is not None:
        memo.no_room.add(gang)
    return chosen


def preempt_scan(
    job: PendingJob,
    cands: list[RunningJob],
    snap: Snapshot,
    ws: Workspace,
    profile: Profile,
    rng: Random,
) -> list[RunningJob]:
    """``preempt`` the plain way: release the candidates in order on a copy of ``ws``, a real
    placement (on another copy) after each, until ``job`` fits; then the reprieve."""
    sim = ws.copy()
    chosen: list[RunningJob] = []
    fits = False
    for v in cands:
        release(sim, v.allocation)
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
                release(trial, other.allocation)
        alloc, _ = place_gang(job.spec, trial, profile.place, rng)
        if alloc is not None:
            chosen.remove(v)
    return chosen


def hold_for(
    job: PendingJob, victims: list[RunningJob], ws: Workspace, profile: Profile, rng: Random
) -> None:
    """Keep the nodes ``job`` will start on once its victims stop out of the rest of this cycle:
    else a later job backfills their free GPUs and, as LAS does, the victims and that job can
    preempt each other at one instant forever."""
    trial = ws.copy()
    for v in victims:
        release(trial, v.allocation)
    plan, _ = place_gang(job.spec, trial, profile.place, rng)
    for p in plan or ():
        i = ws.by_name.get(p.node)
        if i is not None:
            ws.hold(i)


def why(victim: RunningJob, job: PendingJob, usage: QueueUsage) -> str:
    if usage.borrowing(victim.spec.queue) and victim.spec.queue != job.spec.queue:
        return f"reclaim: queue {victim.spec.queue} is over its quota; {job.spec.queue} needs it"
    if victim.spec.priority < job.spec.priority:
        return f"priority {job.spec.priority} of job {job.id} over {victim.spec.priority}"
    return f"job {job.id} outranks it in the order"
