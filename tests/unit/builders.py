"""Builders for scheduler and controller tests: nodes, jobs, running jobs, snapshots, profiles.

Every builder has small defaults so that a test names only what it is about::

    nodes = cluster(4, 8, leaves=2)                     # 4 nodes × 8 GPUs, 2 per leaf
    snap = snapshot(nodes, pending=[job("a", gpus=8, workers=2)], running=[...])
    res = run_cycle(snap, profile(place="topology"))

``snapshot`` takes the nodes at full capacity and subtracts what the running jobs hold, so a
test states each fact once. Nodes are named ``n00``, ``n01``…; leaves ``leaf-0``…; pods
``pod-0``….
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpufleet.model.allocation import Placement
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.job import JobSpec, Topology, TopologyLevel
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI, UNLIMITED, Resources
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import (
    NO_MARK,
    NodeView,
    PendingJob,
    RunningJob,
    ServiceMark,
    Snapshot,
)

GIB = 1024
MODEL = "H100-SXM"


# ----- nodes ---------------------------------------------------------------------------------


def node(
    name: str = "n00",
    gpus: int = 8,
    *,
    model: str = MODEL,
    leaf: str = "leaf-0",
    pod: str = "pod-0",
    cpus: float = 112,
    mem_gib: float = 1024,
    schedulable: bool = True,
    datasets: Iterable[str] = (),
    labels: Mapping[str, str] | None = None,
) -> NodeView:
    """One empty node."""
    return NodeView(
        name,
        leaf,
        pod,
        model if gpus else "",
        (MILLI,) * gpus,
        round(cpus * MILLI),
        round(mem_gib * GIB),
        round(cpus * MILLI),
        round(mem_gib * GIB),
        schedulable,
        tuple(sorted((labels or {}).items())),
        frozenset(datasets),
    )


def cluster(
    n: int = 2,
    gpus: int = 8,
    *,
    leaves: int = 1,
    pods: int = 1,
    model: str = MODEL,
    cpus: float = 112,
    mem_gib: float = 1024,
    start: int = 0,
) -> list[NodeView]:
    """``n`` empty nodes of ``gpus`` GPUs, spread evenly (in order) over ``leaves`` leaves,
    and the leaves evenly over ``pods`` pods. ``start`` offsets node and leaf numbering, so
    that two calls can build a mixed cluster."""
    out = []
    for i in range(n):
        leaf = i * leaves // n
        pod = leaf * pods // leaves
        out.append(
            node(
                f"n{start + i:02d}",
                gpus,
                model=model,
                leaf=f"leaf-{start + leaf}" if start else f"leaf-{leaf}",
                pod=f"pod-{pod}",
                cpus=cpus,
                mem_gib=mem_gib,
            )
        )
    return out


def node_spec(
    name: str = "n00",
    gpus: int = 8,
    *,
    model: str = MODEL,
    leaf: str = "leaf-0",
    pod: str = "pod-0",
    cpus: float = 112,
    mem_gib: float = 1024,
) -> NodeSpec:
    return NodeSpec(name, model, gpus, round(cpus * MILLI), round(mem_gib * GIB), leaf, pod)


def cluster_spec(
    n: int = 2,
    gpus: int = 8,
    *,
    leaves: int = 1,
    queues: Iterable[QueueSpec] = (),
    cpus: float = 112,
    mem_gib: float = 1024,
) -> ClusterSpec:
    """The ClusterSpec of ``cluster(n, gpus, leaves=...)`` (for the Controller)."""
    specs = [
        node_spec(
            v.name, v.gpus, model=v.gpu_model, leaf=v.leaf, pod=v.pod, cpus=cpus, mem_gib=mem_gib
        )
        for v in cluster(n, gpus, leaves=leaves, cpus=cpus, mem_gib=mem_gib)
    ]
    return ClusterSpec.build("test", specs, queues)


# ----- jobs ----------------------------------------------------------------------------------


def spec(
    name: str = "job",
    *,
    gpus: int = 1,
    workers: int = 1,
    milli: int = MILLI,
    cpus: float = 1,
    mem_gib: float = 4,
    queue: str = "default",
    user: str = "alice",
    priority: int = 0,
    limit: float | None = None,
    topology: str = "any",
    required: bool = False,
    models: Sequence[str] = (),
    dataset: str = "",
    preemptible: bool = True,
    retries: int = 0,
    requeue: bool = True,
) -> JobSpec:
    return JobSpec(
        name=name,
        user=user,
        queue=queue,
        workers=workers,
        gpus_per_worker=gpus,
        gpu_milli=milli,
        cpu_milli=round(cpus * MILLI),
        memory_mib=round(mem_gib * GIB),
        gpu_models=tuple(models),
        time_limit_s=limit,
        priority=priority,
        preemptible=preemptible,
        topology=Topology(TopologyLevel(topology), required),
        dataset=dataset,
        max_retries=retries,
        requeue=requeue,
    )


def job(
    id: str,
    *,
    submit: float = 0.0,
    seq: int = 0,
    attained: float = 0.0,
    eligible: float = 0.0,
    waiting_for: str = "",
    oracle: float | None = None,
    throttled: bool = False,
    mark: ServiceMark = NO_MARK,
    **spec_kw: Any,
) -> PendingJob:
    """A pending job; keyword arguments other than the PendingJob's own go to ``spec``."""
    return PendingJob(
        id,
        spec(id, **spec_kw),
        submit,
        seq,
        attained_gpu_s=attained,
        eligible_time=eligible,
        waiting_for=waiting_for,
        oracle_duration_s=oracle,
        throttled=throttled,
        mark=mark,
    )


def running(
    id: str,
    *where: tuple[str, Sequence[int]],
    milli: int = MILLI,
    start: float = 0.0,
    borrowing: bool = False,
    attained: float = 0.0,
    cpus: float = 1,
    mem_gib: float = 4,
    **spec_kw: Any,
) -> RunningJob:
    """A running job with one worker per ``(node, devices)`` pair, e.g.
    ``running("r", ("n00", range(8)), ("n01", range(8)))`` is a 2 × 8-GPU gang."""
    if not where:
        raise ValueError("a running job needs at least one (node, devices) placement")
    devs = [tuple(d) for _, d in where]
    gpus = len(devs[0])
    if any(len(d) != gpus for d in devs):
        raise ValueError("every worker of a gang holds the same number of devices")
    alloc = tuple(
        Placement(n, d, milli if d else 0, round(cpus * MILLI), round(mem_gib * GIB))
        for (n, _), d in zip(where, devs, strict=True)
    )
    s = spec(id, gpus=gpus, workers=len(where), milli=milli, cpus=cpus, mem_gib=mem_gib, **spec_kw)
    return RunningJob(id, s, alloc, start, borrowing, attained)


def occupy(nodes: Sequence[NodeView], running_jobs: Iterable[RunningJob]) -> list[NodeView]:
    """The nodes with what ``running_jobs`` hold taken away."""
    free = {v.name: [list(v.gpu_free), v.cpu_free, v.mem_free] for v in nodes}
    for r in running_jobs:
        for p in r.allocation:
            f = free[p.node]
            for d in p.gpus:
                f[0][d] -= p.gpu_milli
                if f[0][d] < 0:
                    raise ValueError(f"{r.id}: device {p.node}/{d} is over-committed")
            f[1] -= p.cpu_milli
            f[2] -= p.memory_mib
    return [
        replace(
            v, gpu_free=tuple(free[v.name][0]), cpu_free=free[v.name][1], mem_free=free[v.name][2]
        )
        for v in nodes
    ]


# ----- queues, snapshots, profiles -----------------------------------------------------------


def queue(
    name: str,
    gpus: float | None = None,
    *,
    cohort: str = "",
    weight: float = 1.0,
    cpus: float | None = None,
    mem_gib: float | None = None,
    can_borrow: bool = True,
    can_lend: bool = True,
) -> QueueSpec:
    """A queue; with no ``gpus``, ``cpus`` or ``mem_gib`` it has no quota at all."""
    if gpus is None and cpus is None and mem_gib is None:
        quota = UNLIMITED
    else:
        quota = Resources(
            UNLIMITED.gpu_milli if gpus is None else round(gpus * MILLI),
            UNLIMITED.cpu_milli if cpus is None else round(cpus * MILLI),
            UNLIMITED.memory_mib if mem_gib is None else round(mem_gib * GIB),
        )
    return QueueSpec(name, quota, weight, cohort, can_borrow, can_lend)


# the capacity outside every quota kept for queues without one (the lending rule's opposite)
RESERVE = {"admit/quota": {"unassigned": "reserve"}}


def snapshot(
    nodes: Sequence[NodeView],
    pending: Sequence[PendingJob] = (),
    running: Sequence[RunningJob] = (),
    *,
    queues: Iterable[QueueSpec] = (),
    now: float = 0.0,
    usage: Mapping[str, float] | None = None,
    cycle: int = 0,
) -> Snapshot:
    """A snapshot of full-capacity ``nodes`` minus what ``running`` holds."""
    return Snapshot(
        now,
        tuple(occupy(nodes, running)),
        tuple(running),
        tuple(pending),
        {q.name: q for q in queues},
        dict(usage or {}),
        cycle,
    )


def profile(
    order: str = "fifo",
    admit: str = "quota",
    place: str = "bestfit",
    backfill: str = "easy",
    preempt: Sequence[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    **kw: Any,
) -> Profile:
    return Profile.build(
        order=order,
        admit=admit,
        place=place,
        backfill=backfill,
        preempt=tuple(preempt),
        options=options,
        **kw,
    )


def cycle(
    nodes: Sequence[NodeView],
    pending: Sequence[PendingJob] = (),
    running: Sequence[RunningJob] = (),
    *,
    queues: Iterable[QueueSpec] = (),
    now: float = 0.0,
    usage: Mapping[str, float] | None = None,
    **profile_kw: Any,
) -> CycleResult:
    """One scheduling cycle: ``snapshot(...)`` through ``profile(**profile_kw)``."""
    snap = snapshot(nodes, pending, running, queues=queues, now=now, usage=usage)
    return run_cycle(snap, profile(**profile_kw))


def start_of(res: CycleResult, job_id: str) -> tuple[Placement, ...] | None:
    """The allocation ``job_id`` started with in ``res``, or None."""
    return next((s.allocation for s in res.starts if s.job_id == job_id), None)


def nodes_of(res: CycleResult, job_id: str) -> list[str]:
    alloc = start_of(res, job_id)
    assert alloc is not None, f"{job_id} did not start: {res.reasons.get(job_id)}"
    return [p.node for p in alloc]
