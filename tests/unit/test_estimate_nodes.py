"""The start plan per node (``scheduler/estimate_nodes``): a job of several GPUs per worker
starts, in the plan, where enough nodes each have room for a worker, and a blocked one keeps the
nodes it will take from the jobs that would run past its start, as EASY's reservation does."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job, profile, running, snapshot

from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI, Resources
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.estimate_forward import Forward
from gpufleet.scheduler.estimate_nodes import NodeRoom, Probe, node_checked, slots
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

G = MILLI


def test_a_worker_of_several_gpus_fits_per_node_not_in_all() -> None:
    room = NodeRoom([3 * G, 3 * G, 8 * G])
    assert room.fits(4, G, 2) and not room.fits(4, G, 3)  # 14 free: two workers, on n2
    assert room.fits(3, G, 4) and not room.fits(3, G, 5)
    assert slots({3: 2, 8: 1}, 4) == 2  # two workers of 4 on the node of 8
    room.take(((2, 5 * G),))
    assert not room.fits(4, G, 1) and room.fits(3, G, 3)
    room.give(((2, 5 * G),))
    assert room.fits(8, G, 1) and room.total == 14 * G


def test_one_gpu_or_a_share_is_counted_in_all() -> None:
    assert not node_checked(1, G) and not node_checked(1, 500) and node_checked(2, G)
    room = NodeRoom([G // 2, G // 2])
    assert room.fits(1, G, 1)  # the caller's count over the cluster decides
    assert room.fits(1, 400, 1, frozenset({0})) and not room.fits(1, G, 1, frozenset({0}))


def test_a_planned_start_is_placed_best_fit_off_the_nodes_kept() -> None:
    room = NodeRoom([8 * G, 2 * G, 4 * G])
    assert room.place(2, G, 1) == ((1, 2 * G),)  # the tightest node with room
    assert room.place(1, G, 1) == ((2, G),)  # n01 is full now: n02 has 4 < 8
    assert room.place(1, G, 1, frozenset({2})) == ((0, G),)
    assert room.place(4, G, 1) == ((0, 4 * G),)
    assert room.free == [3 * G, 0, 3 * G] and room.counts() == {3: 2, 0: 1}


def test_a_worker_no_node_holds_is_spread_where_the_count_admitted_it() -> None:
    room = NodeRoom([G // 2, G // 2])
    takes = room.place(1, G, 1)
    assert sorted(takes) == [(0, G // 2), (1, G // 2)] and room.total == 0


def test_a_probe_releases_what_if_and_leaves_the_room_as_it_was() -> None:
    room = NodeRoom([4 * G, 6 * G, 0])
    probe = Probe(room)
    assert not probe.fits(8, 1)
    probe.add(((2, 8 * G),), 1)
    assert probe.fits(8, 1) and probe.pick(8, 1) == frozenset({2})
    assert probe.pick(4, 2) == frozenset({0, 1})  # best fit: the fewest free first
    assert room.free == [4 * G, 6 * G, 0] and not room.fits(8, G, 1)


def _forward(free: list[int], big_only: bool = False) -> tuple[Forward, dict[str, float]]:
    snap = Snapshot(now=0.0, nodes=(), running=(), pending=())
    runs: dict[str, float] = {}
    fwd = Forward(
        snap,
        QueueUsage({}, (), Resources(sum(free))),
        None,
        sum(free),
        lambda j, t: t + runs[j.id],
        lambda j, t: j.spec.queue,
        lambda j, t, end, q: None,
        NodeRoom(free),
        big_only,
    )
    return fwd, runs


def _job(name: str, gpus: int, run: float, runs: dict[str, float]) -> PendingJob:
    runs[name] = run
    spec = JobSpec(name, "u", gpus_per_worker=gpus, cpu_milli=0, memory_mib=0)
    return PendingJob(name, spec, 0.0)


def _gpus(n: int) -> Resources:
    return Resources(n * G)


def test_a_whole_node_job_waits_for_a_whole_node_and_keeps_it_from_long_jobs() -> None:
    """2 nodes × 4 GPUs, one GPU busy on each (until 100 and 300): 6 GPUs free, but no node
    has 4. H waits for n0 (100), T (10 s) backfills before it, S (1,000 s) runs past it and
    so keeps off n0: it takes n1. S2 finds no room off n0 and waits for H's end."""
    fwd, runs = _forward([4 * G, 4 * G])
    fwd.hold(-1.0, 100.0, "default", _gpus(1), ((0, G),))
    fwd.hold(-1.0, 300.0, "default", _gpus(1), ((1, G),))
    jobs = [_job("H", 4, 50.0, runs), _job("T", 1, 10.0, runs), _job("S", 1, 1000.0, runs)]
    jobs += [_job(f"S{i}", 1, 1000.0, runs) for i in range(2, 5)]
    starts = fwd.play(jobs, 100)
    assert starts["H"] == 100.0 and starts["T"] == 0.0 and starts["S"] == 0.0
    assert starts["S2"] == 0.0 and starts["S3"] == 0.0  # n1 has 3 free: S, S2, S3
    assert starts["S4"] == 150.0  # off n0 until H has ended


def test_counted_in_all_the_same_whole_node_job_would_start_now() -> None:
    """What the plan said before it was played per node (no ``NodeRoom``)."""
    fwd, runs = _forward([4 * G, 4 * G])
    fwd.nodes = None
    fwd.hold(-1.0, 100.0, "default", _gpus(1))
    fwd.hold(-1.0, 300.0, "default", _gpus(1))
    assert fwd.play([_job("H", 4, 50.0, runs)], 10) == {"H": 0.0}


def test_a_cycle_plans_an_eight_gpu_job_for_when_a_node_is_whole() -> None:
    """Half of each node busy: 8 GPUs free over the cluster, none whole. The job behind the
    reserved head is planned, per node, when a second node is whole (n01 at 200)."""
    busy = [
        running("r0", ("n00", range(4)), limit=100.0),
        running("r1", ("n01", range(4)), limit=200.0),
    ]
    pending = [job("a", gpus=8, submit=0, limit=500.0), job("b", gpus=8, submit=1, limit=50.0)]
    snap = snapshot(cluster(2, 8), pending, busy)
    per_node = replace(profile(order="fifo", backfill="easy"), plan_per_node=True)
    res = run_cycle(snap, per_node)
    assert res.reasons["a"].estimated_start == 100.0
    assert res.reasons["a"].start_bound == "reserved"
    assert res.reasons["b"].estimated_start == 200.0
    big = replace(profile(order="fifo", backfill="easy"), plan_big_per_node=True)
    assert run_cycle(snap, big).reasons["b"].estimated_start == 200.0  # 8 GPUs a worker
    # the plan over the cluster alone counts GPUs: b (50 s) would end before a's start, on
    # GPUs that are free but on two nodes
    alone = replace(profile(order="fifo", backfill="easy"), plan_later_of_two=False)
    assert run_cycle(snap, alone).reasons["b"].estimated_start == 0.0
    # the default, the later of the two plans: the one per node's
    res = run_cycle(snap, profile(order="fifo", backfill="easy"))
    assert res.reasons["b"].estimated_start == 200.0


def _one_then_two(big_only: bool, nodes: bool = True) -> dict[str, float]:
    """2 nodes × 2 GPUs, one GPU busy on n0 until 100 and one on n1 until 300: S (1 GPU, 1,000
    s) then B (2 GPUs, 50 s)."""
    fwd, runs = _forward([2 * G, 2 * G], big_only)
    if not nodes:
        fwd.nodes = None
    fwd.hold(-1.0, 100.0, "default", _gpus(1), ((0, G),))
    fwd.hold(-1.0, 300.0, "default", _gpus(1), ((1, G),))
    return fwd.play([_job("S", 1, 1000.0, runs), _job("B", 2, 50.0, runs)], 10)


def test_only_the_big_jobs_per_node_the_one_gpu_jobs_counted_in_all() -> None:
    """``big_only``: B needs a whole node, as per node, but S is counted over the cluster and
    put on no node: B starts when n0's busy GPU ends (100), where per node S, put best fit on
    n0, keeps it until n1 is whole (300); over the cluster B starts at 100 too."""
    assert _one_then_two(big_only=True) == {"S": 0.0, "B": 100.0}
    assert _one_then_two(big_only=False) == {"S": 0.0, "B": 300.0}
    assert _one_then_two(big_only=False, nodes=False) == {"S": 0.0, "B": 100.0}
    # and the whole-node job waits for a whole node where the count over the cluster has room
    fwd, runs = _forward([2 * G, 2 * G], big_only=True)
    fwd.hold(-1.0, 100.0, "default", _gpus(1), ((0, G),))
    fwd.hold(-1.0, 300.0, "default", _gpus(1), ((1, G),))
    assert fwd.play([_job("B", 2, 50.0, runs)], 10) == {"B": 100.0}
