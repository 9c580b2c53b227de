"""EASY's reservation (``backfill.reserve``) gives exactly what the plain linear scan gives: the
same start, allocation and kept capacity, and it leaves the workspace the same. The scan below
is the reference (the code before tries that cannot fit were skipped)."""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby
from random import Random

from builders import cluster, job, node, profile, running, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.model.allocation import Allocation
from gpufleet.model.resources import MILLI
from gpufleet.scheduler import backfill as backfill_mod
from gpufleet.scheduler.decisions import Reservation
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.whatif import first_fit_gang, release
from gpufleet.scheduler.workspace import Workspace

NOW = 100.0


def reference_reserve(
    job: PendingJob,
    ws: Workspace,
    snap: Snapshot,
    started: list[tuple[PendingJob, Allocation]],
    prof: Profile,
    rng: Random,
) -> Reservation | None:
    assumed = prof.backfill.assume_limit_s
    ends = [
        (end, r.allocation)
        for r in snap.running
        if (end := backfill_mod.end_of(r, assumed)) is not None
    ]
    for job_started, alloc in started:
        if job_started.spec.time_limit_s is not None:
            ends.append((snap.now + job_started.spec.time_limit_s, alloc))
    ends.sort(key=lambda e: e[0])
    sim = ws.copy()
    req = WorkerRequest.of(job.spec)
    need = req.gpus * job.spec.workers
    tries = 0
    for t, group in groupby(ends, key=lambda e: e[0]):
        for _, alloc in group:
            release(sim, alloc)
        if req.whole and sim.free_gpus(req) < need:
            continue
        before = (list(sim.full), list(sim.cpu), list(sim.mem))
        found, _ = place_gang(job.spec, sim, prof.place, rng)
        tries += 1
        if found is not None:
            need_at: dict[int, list[int]] = {}
            for placement in found:
                i = sim.by_name[placement.node]
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
            return Reservation(job.id, max(t, snap.now), found)
        if tries >= backfill_mod.MAX_RESERVATION_TRIES:
            break
    return None


def _state(ws: Workspace) -> object:
    """Everything of a workspace a later placement reads, the buckets' order included."""
    return (
        ws.gfree,
        ws.cpu,
        ws.mem,
        ws.reserved,
        ws.reserved_cpu,
        ws.reserved_mem,
        {m: [list(b) for b in bs] for m, bs in ws.buckets.items()},
        {k: [list(b) for b in bs] for k, bs in ws.leaf_buckets.items()},
    )


def both(
    snap: Snapshot, head: PendingJob, prof: Profile, started_jobs: list[PendingJob] = ()
) -> tuple[Reservation | None, Reservation | None]:
    """The reservation by ``reserve`` and by the reference, each on its own workspace set up
    the same way (the started jobs placed first, as the cycle does); asserts the workspaces
    end alike."""
    out = []
    states = []
    # reserve reads the running jobs' ends as the core keeps them (sorted, stably)
    ends = [(r.expected_end, r.allocation) for r in snap.running if r.expected_end is not None]
    kept = replace(snap, ends=tuple(sorted(ends, key=lambda e: e[0])))
    for fn, view in ((backfill_mod.reserve, kept), (reference_reserve, snap)):
        ws = Workspace(view.nodes)
        rng = Random(7)
        started = []
        for s in started_jobs:
            alloc, _ = place_gang(s.spec, ws, prof.place, rng)
            if alloc is not None:
                started.append((s, alloc))
        out.append(fn(head, ws, view, started, prof, rng))
        states.append((_state(ws), rng.random()))
    assert states[0] == states[1]
    return out[0], out[1]


@st.composite
def scenes(draw):
    n = draw(st.integers(1, 12))
    leaves = draw(st.integers(1, min(n, 3)))
    per_node = draw(st.sampled_from((2, 4, 8)))
    nodes = cluster(n, per_node, leaves=leaves)
    if draw(st.booleans()):
        nodes.append(node(f"n{n:02d}", per_node, model="A100-80GB", leaf="leaf-9"))
    host = draw(st.sampled_from(((0, 0), (0, 0), (0, 0), (1, 4))))
    busy = []
    for v in nodes:
        d = 0
        while d < v.gpus:
            width = draw(st.integers(1, v.gpus - d))
            if draw(st.integers(0, 3)):
                busy.append(
                    running(
                        f"r-{v.name}-{d}",
                        (v.name, range(d, d + width)),
                        cpus=host[0],
                        mem_gib=host[1],
                        start=0.0,
                        limit=draw(st.sampled_from((None, 110.0, 150.0, 150.0, 300.0, 900.0))),
                    )
                )
            d += width
    head = job(
        "head",
        gpus=draw(st.integers(1, per_node)),
        workers=draw(st.integers(1, 4)),
        cpus=draw(st.sampled_from((0, 0, 0, 2))),
        mem_gib=draw(st.sampled_from((0, 0, 0, 8))),
        topology=draw(st.sampled_from(("any", "any", "leaf", "node"))),
        required=draw(st.booleans()),
        models=draw(st.sampled_from(((), (), ("A100-80GB",)))),
    )
    started = [
        job(
            f"s{i}",
            gpus=draw(st.integers(1, 2)),
            cpus=0,
            mem_gib=0,
            limit=draw(st.sampled_from((None, 120.0))),
        )
        for i in range(draw(st.integers(0, 2)))
    ]
    prof = profile(
        place=draw(st.sampled_from(("topology", "topology", "bestfit", "packing", "random"))),
        backfill="easy",
        options=None,
    )
    return snapshot(nodes, running=busy, now=NOW), head, prof, started


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenes())
def test_reserve_equals_the_linear_scan(scene) -> None:
    snap, head, prof, started = scene
    got, want = both(snap, head, prof, started)
    assert got == want


def _staircase(n: int) -> tuple[Snapshot, PendingJob]:
    """n nodes, each with a 1-GPU job ending at t = 101, 102, …, and a 7-GPU job ending much
    later: a 2-GPU head fits only once a node's 7-GPU job ends (every earlier try fails)."""
    nodes = cluster(n, 8)
    busy = []
    for i, v in enumerate(nodes):
        busy.append(running(f"one-{i}", (v.name, [0]), cpus=0, mem_gib=0, limit=1.0 + i))
        busy.append(
            running(f"seven-{i}", (v.name, range(1, 8)), cpus=0, mem_gib=0, limit=5000.0 + i)
        )
    head = job("head", gpus=2, workers=2, cpus=0, mem_gib=0)
    return snapshot(nodes, running=busy, now=NOW), head


def test_tries_with_no_node_that_fits_are_counted_without_placing(monkeypatch) -> None:
    snap, head = _staircase(40)
    prof = profile(place="topology", backfill="easy")
    calls = []

    def counting(*a):
        calls.append(1)
        return place_gang(*a)

    monkeypatch.setattr(backfill_mod, "place_gang", counting)
    got, want = both(snap, head, prof)
    assert got == want
    assert got is not None and got.start_time == 5000.0
    # the reference tried every step with 2 free GPUs (39 of them); only the one that fits
    # reached place_gang here
    assert len(calls) == 1


def test_the_try_limit_counts_skipped_tries_too() -> None:
    """More steps than MAX_RESERVATION_TRIES before the fit: both give up."""
    snap, head = _staircase(backfill_mod.MAX_RESERVATION_TRIES + 10)
    got, want = both(snap, head, profile(place="topology", backfill="easy"))
    assert got is None and want is None


def test_no_shortcut_for_a_plugin_that_may_draw_random_numbers() -> None:
    snap, head = _staircase(5)
    ws = Workspace(snap.nodes)
    req = WorkerRequest.of(head.spec)
    prof = profile(place="random", backfill="easy")
    assert not first_fit_gang(head.spec, req, prof.place, ws)
    assert first_fit_gang(head.spec, req, profile(place="topology", backfill="easy").place, ws)
    got, want = both(snap, head, prof)
    assert got == want


def test_tries_where_only_some_workers_fit_are_not_placed(monkeypatch) -> None:
    """A 3 × 4-GPU gang; each step frees 6 GPUs on the next node. The second step has the 12
    GPUs but room for two workers only: that try fails after placing two, and gives them back
    in reverse (n01 before n00 in their bucket), which decides where the third step places
    the gang. (A fractional job on every node keeps the nodes partly used as well.)"""
    nodes = cluster(6, 8, leaves=2)
    busy = []
    for i, v in enumerate(nodes):
        busy.append(running(f"frac-{i}", (v.name, [0]), milli=500, cpus=0, mem_gib=0, limit=9e9))
        busy.append(running(f"one-{i}", (v.name, [1]), cpus=0, mem_gib=0, limit=9e9))
        busy.append(
            running(f"six-{i}", (v.name, range(2, 8)), cpus=0, mem_gib=0, start=NOW, limit=10.0 + i)
        )
    snap = snapshot(nodes, running=busy, now=NOW)
    head = job("head", gpus=4, workers=3, cpus=0, mem_gib=0)
    calls = []

    def counting(*a):
        calls.append(1)
        return place_gang(*a)

    monkeypatch.setattr(backfill_mod, "place_gang", counting)
    for place in ("topology", "bestfit"):
        calls.clear()
        got, want = both(snap, head, profile(place=place, backfill="easy"))
        assert got == want
        assert got is not None and got.start_time == NOW + 12.0
        assert [p.node for p in got.allocation][:2] == ["n01", "n00"]
        assert len(calls) == 1


def test_a_single_worker_takes_the_node_the_releases_moved_first(monkeypatch) -> None:
    """Two nodes get room at the same end time; n03's job comes first in the running jobs, so
    its release puts n03 ahead of n01 in their bucket, and the head goes there, unplaced."""
    nodes = cluster(4, 8)
    busy = [running(f"six-{i}", (v.name, range(6)), cpus=0, mem_gib=0) for i, v in enumerate(nodes)]
    ends = {"n03": 120.0, "n01": 120.0, "n00": 130.0, "n02": 140.0}
    for name, end in ends.items():
        busy.append(
            running(f"two-{name}", (name, [6, 7]), cpus=0, mem_gib=0, start=NOW, limit=end - NOW)
        )
    snap = snapshot(nodes, running=busy, now=NOW)
    head = job("head", gpus=2, cpus=0, mem_gib=0)
    calls = []

    def counting(*a):
        calls.append(1)
        return place_gang(*a)

    monkeypatch.setattr(backfill_mod, "place_gang", counting)
    got, want = both(snap, head, profile(place="topology", backfill="easy"))
    assert got == want
    assert got is not None and got.start_time == 120.0
    assert [(p.node, p.gpus) for p in got.allocation] == [("n03", (6, 7))]
    assert calls == []


def test_a_job_started_this_cycle_frees_after_running_jobs_that_end_with_it() -> None:
    """r on n00 and s, started this cycle on n01, both end at t=150: r's node is released
    first, so it is first in the bucket, and the head's reservation is on n00."""
    nodes = cluster(3, 8)
    busy = [
        running("six-0", ("n00", range(6)), cpus=0, mem_gib=0),
        running("r", ("n00", [6, 7]), cpus=0, mem_gib=0, start=NOW, limit=50.0),
        running("six-1", ("n01", range(6)), cpus=0, mem_gib=0),
        running("all-2", ("n02", range(8)), cpus=0, mem_gib=0),
    ]
    snap = snapshot(nodes, running=busy, now=NOW)
    s = job("s", gpus=2, cpus=0, mem_gib=0, limit=50.0)
    head = job("head", gpus=2, cpus=0, mem_gib=0)
    got, want = both(snap, head, profile(place="topology", backfill="easy"), [s])
    assert got == want
    assert got is not None and got.start_time == 150.0
    assert [p.node for p in got.allocation] == ["n00"]
