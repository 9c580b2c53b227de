"""``tiresias``: ``job_id,num_gpu,submit_time,duration`` (plus the ignored ``iterations,
model_name,interval``). All jobs go to queue ``default``; ``model_name`` is the job's name. A
job larger than a node is a gang, as in ``philly``."""

from __future__ import annotations

from pathlib import Path

from gpufleet.sim.engine import TraceJob
from gpufleet.sim.traces.loader import (
    DEFAULT_GPUS_PER_NODE,
    MAX_GPUS_PER_JOB,
    LoadOptions,
    TraceFormat,
    finish,
    gpu_job,
)
from gpufleet.sim.traces.rows import csv_rows

TIRESIAS_REQUIRED = ("job_id", "num_gpu", "submit_time", "duration")
TIRESIAS_OPTIONAL = ("iterations", "model_name", "interval")


def load_tiresias(
    path: str | Path, *, gpus_per_node: int = DEFAULT_GPUS_PER_NODE
) -> list[TraceJob]:
    p = Path(path)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for row in csv_rows(p, TIRESIAS_REQUIRED, TIRESIAS_OPTIONAL):
        jid = row.text("job_id")
        if jid in seen:
            raise row.error("job_id", f"job {jid!r} is already on line {seen[jid]}")
        seen[jid] = row.line
        gpus = row.integer("num_gpu", minimum=1, maximum=MAX_GPUS_PER_JOB)
        submit = row.number("submit_time")
        duration = row.number("duration")
        name = row.text("model_name", required=False) or jid
        spec = gpu_job(jid, name, "default", gpus, gpus_per_node)
        jobs.append(TraceJob(jid, spec, submit, duration))
    return finish(jobs, str(p))


def _load(path: Path, options: LoadOptions) -> list[TraceJob]:
    return load_tiresias(path, gpus_per_node=options.gpus_per_node)


FORMAT = TraceFormat("tiresias", _load)
