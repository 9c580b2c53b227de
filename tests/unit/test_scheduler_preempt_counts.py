"""Step 5 on free counts (``victims.fewest_victims``) gives the plain scan's victims
(``preemption.preempt_scan``: release on copies, place for real) for first-fit gangs; and a cycle
asks a preempt plugin for victims once per ``victims_key``."""

from __future__ import annotations

from random import Random

import pytest
from builders import cluster, job, profile, running, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.model.resources import MILLI
from gpufleet.scheduler import preemption as preemption_mod
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.framework import Admission, Profile, Victims
from gpufleet.scheduler.plugins import preempt_order
from gpufleet.scheduler.preemption import preempt_scan
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage
from gpufleet.scheduler.victims import fewest_victims
from gpufleet.scheduler.whatif import first_fit_gang
from gpufleet.scheduler.workspace import Workspace

NOW = 1000.0


@st.composite
def scenes(draw: st.DrawFn) -> tuple[Workspace, list[RunningJob], int, int, str]:
    """A busy cluster (some devices shared by fractions, some nodes held out of the indexes),
    the candidates in some order, and a whole-GPU gang: GPUs per worker, workers, model."""
    gpus = draw(st.sampled_from([4, 8]))
    n = draw(st.integers(2, 6))
    nodes = cluster(n, gpus, leaves=draw(st.integers(1, 2)), cpus=0, mem_gib=0)
    if draw(st.booleans()):  # a second GPU model on the last nodes
        cut = draw(st.integers(1, n - 1))
        nodes = nodes[:cut] + cluster(n - cut, gpus, model="A100", start=cut, cpus=0, mem_gib=0)
    free = {v.name: [MILLI] * gpus for v in nodes}
    busy: list[RunningJob] = []
    for k in range(draw(st.integers(0, 12))):
        milli = draw(st.sampled_from([MILLI, MILLI, MILLI, 500, 250]))
        width = 1 if milli < MILLI else draw(st.integers(1, gpus))
        workers = draw(st.integers(1, 2))
        where = []
        for v in draw(st.permutations(nodes))[:workers]:
            devs = [d for d in range(gpus) if free[v.name][d] >= milli][:width]
            if len(devs) == width:
                where.append((v.name, devs))
        if not where:
            continue
        for name, devs in where:
            for d in devs:
                free[name][d] -= milli
        start = draw(st.sampled_from([0.0, 100.0, 500.0, 900.0]))
        busy.append(running(f"r{k}", *where, milli=milli, start=start, cpus=0, mem_gib=0))
    snap = snapshot(nodes, running=busy, now=NOW)
    ws = Workspace(snap.nodes)
    for i in draw(st.lists(st.integers(0, n - 1), max_size=2)):
        ws.hold(i)  # a node an earlier preemptor holds for itself
    cands = draw(st.permutations(busy))[: draw(st.integers(0, len(busy)))]
    model = draw(st.sampled_from(["", "A100"]))
    return ws, cands, draw(st.integers(1, gpus)), draw(st.integers(1, 3)), model


def _state(ws: Workspace) -> object:
    buckets = {m: [list(b) for b in bs] for m, bs in ws.buckets.items()}
    return list(ws.gfree), list(ws.full), list(ws.ok), buckets, ws.free_full


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_fewest_victims_equals_the_plain_scan(
    scene: tuple[Workspace, list[RunningJob], int, int, str],
) -> None:
    ws, cands, gpus, workers, model = scene
    pending = job("p", gpus=gpus, workers=workers, cpus=0, mem_gib=0, models=[model] * bool(model))
    prof = profile(place="topology")
    req = WorkerRequest.of(pending.spec)
    assert first_fit_gang(pending.spec, req, prof.place, ws)
    before = _state(ws)
    plain = preempt_scan(pending, list(cands), snapshot([], now=NOW), ws, prof, Random(0))
    counted = fewest_victims(req, workers, cands, ws, NOW)
    assert [v.id for v in counted] == [v.id for v in plain]
    assert _state(ws) == before  # neither changes the cycle's workspace


@st.composite
def crowds(draw: st.DrawFn) -> tuple[Workspace, list[RunningJob], int, int]:
    """A full cluster of small jobs (1 to 3 devices, some two workers wide), all candidates,
    in some order, and a gang wide enough that many go before it fits: the reprieve runs many
    trials, each after the ones before it may have kept a victim."""
    gpus = 8
    n = draw(st.integers(2, 4))
    nodes = cluster(n, gpus, cpus=0, mem_gib=0)
    busy: list[RunningJob] = []
    for v in nodes:
        d = 0
        while d < gpus:
            width = min(draw(st.integers(1, 3)), gpus - d)
            start = draw(st.sampled_from([0.0, 100.0, 500.0, 900.0]))
            busy.append(
                running(
                    f"r{len(busy)}", (v.name, range(d, d + width)), start=start, cpus=0, mem_gib=0
                )
            )
            d += width
    ws = Workspace(snapshot(nodes, running=busy, now=NOW).nodes)
    return ws, draw(st.permutations(busy)), draw(st.integers(2, 8)), draw(st.integers(1, n))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowds())
def test_fewest_victims_equals_the_plain_scan_over_many_victims(
    scene: tuple[Workspace, list[RunningJob], int, int],
) -> None:
    ws, cands, gpus, workers = scene
    pending = job("p", gpus=gpus, workers=workers, cpus=0, mem_gib=0)
    prof = profile(place="topology")
    req = WorkerRequest.of(pending.spec)
    plain = preempt_scan(pending, list(cands), snapshot([], now=NOW), ws, prof, Random(0))
    counted = fewest_victims(req, workers, cands, ws, NOW)
    assert [v.id for v in counted] == [v.id for v in plain]


def test_a_victim_not_needed_after_all_is_reprieved() -> None:
    """r0 (2 GPUs of n00) is cheapest but releasing it alone leaves no 8-GPU node; r1 and r2
    (the rest of n00) are needed, r0 is not: it keeps running."""
    nodes = cluster(1, 8, cpus=0, mem_gib=0)
    r0 = running("r0", ("n00", [0, 1]), start=900.0, cpus=0, mem_gib=0)
    r1 = running("r1", ("n00", [2, 3, 4]), start=500.0, cpus=0, mem_gib=0)
    r2 = running("r2", ("n00", [5, 6, 7]), start=100.0, cpus=0, mem_gib=0)
    ws = Workspace(snapshot(nodes, running=[r0, r1, r2], now=NOW).nodes)
    req = WorkerRequest.of(job("p", gpus=6, cpus=0, mem_gib=0).spec)
    assert [v.id for v in fewest_victims(req, 1, [r0, r1, r2], ws, NOW)] == ["r1", "r2"]


class _Counting(preempt_order.Plugin):
    def __init__(self) -> None:
        self.calls = 0

    def victims(self, *args: object, **kw: object) -> Victims:  # type: ignore[override]
        self.calls += 1
        return super().victims(*args, **kw)  # type: ignore[arg-type]


def test_a_cycle_asks_for_victims_once_per_las_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six pending jobs of LAS level 0 that all fail to place, over a cluster held by jobs past
    the threshold, which all together cannot make room: one victims call, not six, and one
    search of them (capacity only shrinks in a cycle, so the other five would find none)."""
    searches: list[str] = []

    def counted(*args: object) -> list[RunningJob]:
        searches.append("search")
        return fewest_victims(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(preemption_mod, "fewest_victims", counted)
    nodes = cluster(2, 8, cpus=0, mem_gib=0)
    busy = [
        running(
            f"r{k}", (f"n0{k // 4}", [2 * k % 8, 2 * k % 8 + 1]), attained=5e3, cpus=0, mem_gib=0
        )
        for k in range(8)
    ]
    pending = [job(f"p{k}", gpus=8, workers=3, submit=k, cpus=0, mem_gib=0) for k in range(6)]
    prof = profile(order="las", place="topology", preempt=["order"],
                   options={"order/las": {"unsaved_once": False}})  # fmt: skip
    counting = _Counting()
    object.__setattr__(prof, "preempt", (counting,))
    res = run_cycle(snapshot(nodes, pending, busy, now=NOW), prof)
    assert res.preemptions == [] and res.starts == []
    assert counting.calls == 1
    assert searches == ["search"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([100.0, 3200.0, 5000.0, 20000.0]), min_size=1, max_size=3, unique=True
    ),
    st.sampled_from([0.0, 99.0, 100.0, 3200.0, 4999.0, 25000.0]),
    st.lists(
        st.tuples(st.sampled_from([0.0, 1.0, 100.0, 3200.0]), st.sampled_from([0.0, 990.0, NOW])),
        max_size=8,
    ),
)
def test_las_outranked_is_outranks_over_the_running_jobs(
    thresholds: list[float], attained: float, busy: list[tuple[float, float]]
) -> None:
    """Service at a threshold exactly counts as past it (``bisect_right``), as ``outranks``
    has it; the order of ``snap.running`` is kept."""
    from gpufleet.scheduler.plugins import order_las

    las = order_las.Plugin(sorted(thresholds))
    runs = [
        running(f"r{k}", ("n00", [k % 8]), start=start, attained=a, cpus=0, mem_gib=0)
        for k, (a, start) in enumerate(busy)
    ]
    snap = snapshot(cluster(1, 8, cpus=0, mem_gib=0), running=runs[:8], now=NOW)
    pending = job("p", attained=attained)
    expected = [r.id for r in snap.running if las.outranks(pending, r, snap)]
    assert [r.id for r in las.outranked(pending, snap)] == expected


def _reference_preempt(
    job: PendingJob,
    adm: Admission,
    snap: Snapshot,
    usage: QueueUsage,
    ws: Workspace,
    profile: Profile,
    rng: Random,
    taken: set[str],
    memo: object = None,
) -> list[RunningJob]:
    """Step 5 as it was: every job asks every plugin, and the plain scan decides."""
    seen: set[str] = set()
    cands: list[RunningJob] = []
    for plugin in profile.preempt:
        for v in plugin.victims(job, adm, snap, usage, profile.order).jobs:
            if v.id not in seen and v.id not in taken and v.spec.preemptible:
                seen.add(v.id)
                cands.append(v)
    if not cands:
        return []
    return preempt_scan(job, cands, snap, ws, profile, rng)


@st.composite
def cycles(draw: st.DrawFn) -> tuple[Snapshot, Profile]:
    """A busy cluster under LAS (or priority) preemption and pending jobs of many shapes: whole
    GPUs only (decided on counts) or with CPUs too (the plain scan), gangs, required leaves."""
    gpus = draw(st.sampled_from([4, 8]))
    nodes = cluster(draw(st.integers(2, 6)), gpus, leaves=2, cpus=8, mem_gib=0)
    free = {v.name: [MILLI] * gpus for v in nodes}
    busy: list[RunningJob] = []
    for k in range(draw(st.integers(0, 14))):
        v = draw(st.sampled_from(nodes))
        width = draw(st.integers(1, gpus))
        devs = [d for d in range(gpus) if free[v.name][d] == MILLI][:width]
        if len(devs) < width:
            continue
        for d in devs:
            free[v.name][d] = 0
        busy.append(
            running(
                f"r{k}",
                (v.name, devs),
                start=draw(st.sampled_from([0.0, 500.0, 990.0])),
                attained=draw(st.sampled_from([0.0, 3000.0, 9000.0])),
                priority=draw(st.integers(0, 1)),
                preemptible=draw(st.booleans()) or draw(st.booleans()),
                cpus=0,
                mem_gib=0,
            )
        )
    pending = [
        job(
            f"p{k}",
            submit=float(k),
            gpus=draw(st.integers(1, gpus)),
            workers=draw(st.integers(1, 3)),
            attained=draw(st.sampled_from([0.0, 0.0, 5000.0])),
            priority=draw(st.integers(0, 2)),
            cpus=draw(st.sampled_from([0, 0, 1])),
            mem_gib=0,
            topology=draw(st.sampled_from(["any", "leaf"])),
            required=draw(st.booleans()),
        )
        for k in range(draw(st.integers(1, 8)))
    ]
    order, preempt = draw(st.sampled_from([("las", ["order"]), ("priority", ["priority"])]))
    prof = profile(order=order, place="topology", backfill="easy", preempt=preempt)
    return snapshot(nodes, pending, busy, now=NOW), prof


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cycles())
def test_a_cycle_decides_as_with_the_plain_preemption(
    scene: tuple[Snapshot, Profile],
) -> None:
    snap, prof = scene
    fast = run_cycle(snap, prof)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(preemption_mod, "preempt", _reference_preempt)
        plain = run_cycle(snap, prof)
    assert fast.starts == plain.starts
    assert fast.preemptions == plain.preemptions
    assert fast.reservation == plain.reservation
    assert fast.reasons == plain.reasons
