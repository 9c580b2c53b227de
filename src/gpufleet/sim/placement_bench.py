"""The placement benchmark of issue 2: one scheduling cycle over a large synthetic cluster.

Workload (``build``): ``nodes`` nodes × ``gpus_per_node`` GPUs in ``leaves`` leaf switches
(``LEAVES_PER_POD`` leaves to a pod), ``jobs`` pending 1-GPU jobs plus ``gangs`` mixed gangs of
2–64 GPUs, spread over ``queues`` fair-share queues with unequal weights and decayed past usage.
All specs come from a seeded ``random.Random``, so a seed gives the same workload everywhere.

Scheduler time is the wall time of ``run_cycle(snapshot, profile)`` alone (``perf_counter``
around the call); building the snapshot is outside it. The profile explains every job left
pending (step 6), so reasons are included in the time, as in production.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any

from gpufleet.model.allocation import Placement
from gpufleet.model.job import JobSpec, Topology, TopologyLevel
from gpufleet.model.queue import QueueSpec
from gpufleet.scheduler import explain
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot

LEAVES_PER_POD = 8
GPU_MODEL = "H100-SXM"
NODE_CPU_MILLI = 128_000
NODE_MEM_MIB = 2048 * 1024
NOW = 1_000_000.0
# gang sizes in GPUs and how they are cut into workers (workers, GPUs per worker)
GANG_SHAPES: dict[int, tuple[tuple[int, int], ...]] = {
    2: ((1, 2), (2, 1)),
    4: ((1, 4), (2, 2)),
    8: ((1, 8), (2, 4)),
    16: ((2, 8),),
    32: ((4, 8),),
    64: ((8, 8),),
}
TOPOLOGIES = (
    Topology(),
    Topology(TopologyLevel.LEAF, required=False),
    Topology(TopologyLevel.LEAF, required=True),
    Topology(TopologyLevel.POD, required=True),
)
TIME_LIMITS = (1800.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
PROFILE = {"order": "fairshare", "admit": "quota", "place": "topology", "backfill": "easy"}


@dataclass(frozen=True)
class Workload:
    snapshot: Snapshot
    nodes: int
    gpus: int
    jobs: int  # pending 1-GPU jobs
    gangs: int  # pending multi-GPU jobs
    leaves: int
    queues: int
    seed: int
    busy: float = 0.0

    @property
    def pending(self) -> int:
        return self.jobs + self.gangs


def build_nodes(
    nodes: int,
    leaves: int,
    gpus_per_node: int,
    busy: float = 0.0,
    rng: Random | None = None,
    queues: Sequence[str] = ("team0",),
) -> tuple[tuple[NodeView, ...], tuple[RunningJob, ...]]:
    """``nodes`` nodes dealt into ``leaves`` leaves in contiguous blocks, and the running jobs
    that hold about ``busy`` of their GPUs (single-node jobs of 1, 2, 4 or 8 GPUs, each with a
    time limit that ends in the future, so EASY backfill can compute a reservation)."""
    if nodes < 1 or leaves < 1 or gpus_per_node < 1:
        raise ValueError("nodes, leaves and gpus_per_node must be at least 1")
    if not 0.0 <= busy <= 1.0:
        raise ValueError("busy must be between 0 and 1")
    rng = rng or Random(0)
    leaves = min(leaves, nodes)
    out = []
    running: list[RunningJob] = []
    for i in range(nodes):
        leaf = i * leaves // nodes
        name = f"node{i:05d}"
        free = [1000] * gpus_per_node
        cpu, mem = NODE_CPU_MILLI, NODE_MEM_MIB
        used = 0
        target = round(busy * gpus_per_node * rng.uniform(0.5, 1.5)) if busy else 0
        target = min(target, gpus_per_node)
        while used < target:
            k = min(rng.choice((1, 2, 4, 8)), target - used)
            devs = tuple(range(used, used + k))
            for d in devs:
                free[d] = 0
            used += k
            limit = rng.choice(TIME_LIMITS)
            spec = JobSpec(
                name=f"run-{len(running)}",
                user=f"user{rng.randrange(64)}",
                queue=rng.choice(queues),
                gpus_per_worker=k,
                cpu_milli=k * 8000,
                memory_mib=k * 64 * 1024,
                time_limit_s=limit,
            )
            cpu -= spec.cpu_milli
            mem -= spec.memory_mib
            running.append(
                RunningJob(
                    f"r{len(running):06d}",
                    spec,
                    (Placement(name, devs, 1000, spec.cpu_milli, spec.memory_mib),),
                    start_time=NOW - rng.uniform(0.0, limit),
                )
            )
        out.append(
            NodeView(
                name=name,
                leaf=f"leaf{leaf:03d}",
                pod=f"pod{leaf // LEAVES_PER_POD:02d}",
                gpu_model=GPU_MODEL,
                gpu_free=tuple(free),
                cpu_free=cpu,
                mem_free=mem,
                cpu_total=NODE_CPU_MILLI,
                mem_total=NODE_MEM_MIB,
            )
        )
    return tuple(out), tuple(running)


def _single(rng: Random, i: int, queue: str) -> JobSpec:
    cpus = rng.choice((2, 4, 8, 12))
    return JobSpec(
        name=f"train-{i}",
        user=f"user{rng.randrange(64)}",
        queue=queue,
        workers=1,
        gpus_per_worker=1,
        cpu_milli=cpus * 1000,
        memory_mib=cpus * 8 * 1024,
        time_limit_s=rng.choice(TIME_LIMITS),
        priority=rng.choice((0, 0, 0, 10)),
    )


def _gang(rng: Random, i: int, queue: str, gpus_per_node: int) -> JobSpec:
    size = rng.choice(tuple(GANG_SHAPES))
    workers, per = rng.choice(GANG_SHAPES[size])
    per = min(per, gpus_per_node)
    workers = size // per
    return JobSpec(
        name=f"gang-{i}",
        user=f"user{rng.randrange(64)}",
        queue=queue,
        workers=workers,
        gpus_per_worker=per,
        cpu_milli=per * 8000,
        memory_mib=per * 64 * 1024,
        time_limit_s=rng.choice(TIME_LIMITS),
        priority=rng.choice((0, 0, 10)),
        topology=rng.choice(TOPOLOGIES) if workers > 1 else Topology(),
    )


def build(
    nodes: int = 5000,
    jobs: int = 10_000,
    gangs: int = 2000,
    leaves: int = 40,
    gpus_per_node: int = 8,
    queues: int = 8,
    seed: int = 0,
    busy: float = 0.0,
) -> Workload:
    """The benchmark's snapshot: a cluster (empty, or ``busy`` of its GPUs held by running
    jobs) and ``jobs + gangs`` pending jobs, submitted over the last day."""
    if jobs < 0 or gangs < 0 or queues < 1:
        raise ValueError("jobs and gangs must be >= 0 and queues >= 1")
    rng = Random(seed)
    qnames = [f"team{q}" for q in range(queues)]
    node_views, running = build_nodes(nodes, leaves, gpus_per_node, busy, rng, qnames)
    qspecs = {q: QueueSpec(q, weight=float(1 + k % 4)) for k, q in enumerate(qnames)}
    past = {q: rng.uniform(0.0, 0.5) * 7 * 86400 for q in qnames}
    specs = [_single(rng, i, rng.choice(qnames)) for i in range(jobs)]
    specs += [_gang(rng, i, rng.choice(qnames), gpus_per_node) for i in range(gangs)]
    rng.shuffle(specs)
    times = sorted(NOW - rng.uniform(0, 86400) for _ in specs)
    pending = tuple(
        PendingJob(f"j{k:06d}", s, t, seq=k)
        for k, (s, t) in enumerate(zip(specs, times, strict=True))
    )
    snap = Snapshot(NOW, node_views, running, pending, qspecs, past, cycle=1)
    return Workload(snap, nodes, nodes * gpus_per_node, jobs, gangs, leaves, queues, seed, busy)


def profile(seed: int = 0, place: str = PROFILE["place"]) -> Profile:
    return Profile.build(
        order=PROFILE["order"],
        admit=PROFILE["admit"],
        place=place,
        backfill=PROFILE["backfill"],
        seed=seed,
    )


@dataclass
class Measurement:
    workload: Workload
    result: CycleResult
    times_s: list[float] = field(default_factory=list)  # wall (perf_counter) per cycle
    explain_s: list[float] = field(default_factory=list)  # of which step 6 (reasons)
    cpu_s: list[float] = field(default_factory=list)  # process CPU time per cycle
    place: str = PROFILE["place"]

    @property
    def cycle_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def placed(self) -> int:
        return len(self.result.starts)

    def as_dict(self) -> dict[str, Any]:
        w, r = self.workload, self.result
        placed_gpus = sum(len(p.gpus) for s in r.starts for p in s.allocation)
        workers = sum(len(s.allocation) for s in r.starts)
        s = self.cycle_s
        return {
            "benchmark": "placement",
            "nodes": w.nodes,
            "gpus": w.gpus,
            "leaves": min(w.leaves, w.nodes),
            "queues": w.queues,
            "pending": w.pending,
            "pending_1gpu": w.jobs,
            "pending_gangs": w.gangs,
            "running": len(w.snapshot.running),
            "busy_gpus": sum(len(p.gpus) for rj in w.snapshot.running for p in rj.allocation),
            "profile": {**PROFILE, "place": self.place},
            "explain_included": True,
            "seed": w.seed,
            "repeats": len(self.times_s),
            "cycle_s": round(s, 6),
            "cycle_s_all": [round(t, 6) for t in self.times_s],
            "explain_s": round(statistics.median(self.explain_s), 6) if self.explain_s else None,
            "cpu_s": round(statistics.median(self.cpu_s), 6) if self.cpu_s else None,
            "placed": self.placed,
            "placed_workers": workers,
            "placed_gpus": placed_gpus,
            "examined": r.examined,
            "reasons": len(r.reasons),
            "reserved_job": r.reservation.job_id if r.reservation else None,
            "placements_per_s": round(self.placed / s, 1) if s > 0 else None,
            "ms_per_placement": round(1000 * s / self.placed, 4) if self.placed else None,
            "us_per_pending_job": round(1e6 * s / w.pending, 3) if w.pending else None,
        }


def time_cycle(snap: Snapshot, prof: Profile) -> tuple[float, CycleResult]:
    """One cycle's scheduler time (garbage collection left on, as in production)."""
    t0 = time.perf_counter()
    res = run_cycle(snap, prof)
    return time.perf_counter() - t0, res


def measure(
    workload: Workload, repeats: int = 3, seed: int = 0, place: str = PROFILE["place"]
) -> Measurement:
    """Run the same cycle ``repeats`` times (it is pure: the same snapshot gives the same
    decisions) and keep every time; the figure is the median. Step 6 (reasons) is timed on
    the side by wrapping ``explain.explain_all`` for the duration."""
    prof = profile(seed, place)
    m: Measurement | None = None
    spent: list[float] = []
    inner = explain.explain_all

    def timed_explain(*args: Any) -> None:
        t = time.perf_counter()
        inner(*args)
        spent.append(time.perf_counter() - t)

    explain.explain_all = timed_explain  # type: ignore[assignment]
    try:
        for _ in range(max(1, repeats)):
            gc.collect()
            spent.clear()
            c0 = time.process_time()
            t, r = time_cycle(workload.snapshot, prof)
            c = time.process_time() - c0
            if m is None:
                m = Measurement(workload, r, place=place)
            m.times_s.append(t)
            m.cpu_s.append(c)
            m.explain_s.append(sum(spent))
    finally:
        explain.explain_all = inner
    assert m is not None
    return m


def placement(
    nodes: int = 5000,
    jobs: int = 10_000,
    gangs: int = 2000,
    leaves: int = 40,
    gpus_per_node: int = 8,
    queues: int = 8,
    seed: int = 0,
    repeats: int = 3,
    busy: float = 0.0,
    place: str = PROFILE["place"],
) -> dict[str, Any]:
    w = build(nodes, jobs, gangs, leaves, gpus_per_node, queues, seed, busy)
    return measure(w, repeats, seed, place).as_dict()


# ----- scaling ---------------------------------------------------------------------------

SCALING_NODES = (500, 1000, 2000, 5000)
SCALING_PENDING = (1000, 10_000, 100_000)
GANG_FRACTION = 1 / 6  # as in the headline: 2,000 gangs among 12,000 pending


def split(pending: int) -> tuple[int, int]:
    """(1-GPU jobs, gangs) for ``pending`` jobs in the headline's 5:1 mix."""
    gangs = round(pending * GANG_FRACTION)
    return pending - gangs, gangs


def scaling(
    nodes_axis: Iterable[int] = SCALING_NODES,
    pending_axis: Iterable[int] = SCALING_PENDING,
    fixed_pending: int = 12_000,
    leaves: int = 40,
    gpus_per_node: int = 8,
    queues: int = 8,
    seed: int = 0,
    repeats: int = 3,
    busy: float = 0.0,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Cycle cost as nodes grow at ``fixed_pending`` pending jobs (``nodes`` rows), and over
    the whole grid nodes × pending (``grid`` rows; its rows at the largest node count are the
    pending axis). ``marginal`` is the cost of one more pending job at each node count."""
    out: dict[str, Any] = {"nodes": [], "grid": []}

    def one(axis: str, n: int, p: int) -> None:
        j, g = split(p)
        row = placement(n, j, g, leaves, gpus_per_node, queues, seed, repeats, busy)
        row["axis"] = axis
        out[axis].append(row)
        if progress is not None:
            progress(row)

    ns, ps = list(nodes_axis), list(pending_axis)
    for n in ns:
        one("nodes", n, fixed_pending)
    for n in ns:
        for p in ps:
            one("grid", n, p)
    out["marginal"] = marginals(out["grid"])
    return out


def marginals(grid: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At each node count, what one more pending job costs between the two largest pending
    counts of the grid. A nodes × pending term would make it grow with the node count."""
    by: dict[int, dict[int, dict[str, Any]]] = {}
    for r in grid:
        by.setdefault(r["nodes"], {})[r["pending"]] = r
    out = []
    for n in sorted(by):
        ps = sorted(by[n])
        if len(ps) < 2:
            continue
        lo, hi = by[n][ps[-2]], by[n][ps[-1]]
        dp = hi["pending"] - lo["pending"]
        dc = hi["cycle_s"] - lo["cycle_s"]
        de = (hi["explain_s"] or 0.0) - (lo["explain_s"] or 0.0)
        dcpu = (hi["cpu_s"] or 0.0) - (lo["cpu_s"] or 0.0)
        out.append(
            {
                "nodes": n,
                "pending_from": lo["pending"],
                "pending_to": hi["pending"],
                "delta_ms": round(1000 * dc, 1),
                "us_per_pending": round(1e6 * dc / dp, 3),
                "cpu_us_per_pending": round(1e6 * dcpu / dp, 3),
                "explain_us_per_pending": round(1e6 * de / dp, 3),
                "delta_placed": hi["placed"] - lo["placed"],
            }
        )
    return out


# ----- memory ----------------------------------------------------------------------------


def _rss_mib() -> float:
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def memory(
    nodes: int = 5000,
    pending: int = 100_000,
    leaves: int = 40,
    gpus_per_node: int = 8,
    queues: int = 8,
    seed: int = 0,
    traced: bool = True,
    busy: float = 0.0,
) -> dict[str, Any]:
    """The footprint of a ``nodes``-node cluster with ``pending`` pending jobs: the snapshot
    (node views and pending jobs) and one cycle over it (its workspace, order, decisions and a
    reason per job). RSS is read from /proc (whole process, interpreter included); with
    ``traced`` a second pass measures the Python heap with tracemalloc."""
    j, g = split(pending)
    prof = profile(seed)
    gc.collect()
    rss0 = _rss_mib()
    w = build(nodes, j, g, leaves, gpus_per_node, queues, seed, busy)
    gc.collect()
    rss_snap = _rss_mib()
    t, res = time_cycle(w.snapshot, prof)
    rss_cycle = _rss_mib()
    out: dict[str, Any] = {
        "benchmark": "memory",
        "nodes": nodes,
        "pending": pending,
        "running": len(w.snapshot.running),
        "placed": len(res.starts),
        "reasons": len(res.reasons),
        "cycle_s": round(t, 3),
        "rss_before_mib": round(rss0, 1),
        "rss_after_snapshot_mib": round(rss_snap, 1),
        "rss_after_cycle_mib": round(rss_cycle, 1),
        "rss_peak_mib": round(_peak_rss_mib(), 1),
        "rss_delta_mib": round(max(rss_cycle, _peak_rss_mib()) - rss0, 1),
    }
    del res, w
    if traced:
        gc.collect()
        tracemalloc.start()
        w = build(nodes, j, g, leaves, gpus_per_node, queues, seed, busy)
        snap_cur, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        res = run_cycle(w.snapshot, prof)
        cyc_cur, cyc_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out.update(
            traced_snapshot_mib=round(snap_cur / 2**20, 1),
            traced_cycle_peak_mib=round((cyc_peak - snap_cur) / 2**20, 1),
            traced_result_mib=round((cyc_cur - snap_cur) / 2**20, 1),
            traced_total_peak_mib=round(cyc_peak / 2**20, 1),
        )
        del res, w
    out["limit_mib"] = 1024
    out["fits"] = out["rss_peak_mib"] <= 1024
    return out
