"""What every trace loader shares: its options, the record a format registers under its name, the
GPU gang a job of N GPUs becomes, and the end of every load (the jobs sorted by submit time,
stably, and shifted so that the first submission is at t = 0)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.sim.engine import Recorded, TraceJob
from gpufleet.sim.traces.rows import Row

DEFAULT_GPUS_PER_NODE = 8
MAX_GPUS_PER_JOB = 4096 * 64  # JobSpec's own bounds: 4096 workers × 64 GPUs
MAX_WORKERS = 4096
MAX_GPUS_PER_WORKER = 64


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """What a loader may be told: the GPUs of the cluster's nodes (how a large job is cut into
    a gang), and where to say what it left out (jobs that never ran, CPU-only jobs, steps)."""

    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    notes: list[str] = field(default_factory=list)


Loader = Callable[[Path, LoadOptions], list[TraceJob]]


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """A trace format as the registry knows it: ``--format NAME`` and its loader."""

    name: str
    load: Loader


def finish(jobs: list[TraceJob], source: str) -> list[TraceJob]:
    if not jobs:
        raise SpecError("the trace has no jobs", source=source)
    jobs.sort(key=lambda j: j.submit_time)  # stable: equal times keep file order
    t0 = jobs[0].submit_time
    if t0 == 0:
        return jobs
    return [
        replace(j, submit_time=j.submit_time - t0, recorded=_shifted(j.recorded, t0)) for j in jobs
    ]


def _shifted(rec: Recorded | None, t0: float) -> Recorded | None:
    if rec is None:
        return None
    return replace(
        rec,
        start_time=None if rec.start_time is None else rec.start_time - t0,
        end_time=None if rec.end_time is None else rec.end_time - t0,
    )


def gpu_job(
    job_id: str,
    name: str,
    queue: str,
    gpus: int,
    gpus_per_node: int,
) -> JobSpec:
    """A GPU-only job of ``gpus`` whole GPUs: one worker, or a gang of near-equal workers."""
    workers = max(1, math.ceil(gpus / gpus_per_node))
    per_worker = math.ceil(gpus / workers)
    return JobSpec(
        name=name,
        user="trace",
        queue=queue,
        workers=workers,
        gpus_per_worker=per_worker,
        cpu_milli=0,
        memory_mib=0,
    )


def gang(
    row: Row, column: str, gpus: int, nodes: int
) -> tuple[int, int]:  # (workers, GPUs per worker)
    if gpus > MAX_GPUS_PER_JOB:
        raise row.error(column, f"must be at most {MAX_GPUS_PER_JOB} GPUs, got {gpus}")
    workers = min(max(1, nodes), gpus)
    per = math.ceil(gpus / workers)
    if per > MAX_GPUS_PER_WORKER or workers > MAX_WORKERS:
        workers = math.ceil(gpus / MAX_GPUS_PER_WORKER)
        per = math.ceil(gpus / workers)
    return workers, per


def note_skipped(notes: list[str] | None, source: str, skipped: Counter[str]) -> None:
    if notes is None:
        return
    for why, n in sorted(skipped.items()):
        notes.append(f"{source}: left out {n:,} job(s): {why}")
