"""``philly``: ``timestamp,duration,num_gpus,gpu_time,cluster`` (Microsoft Philly, via Pollux).

The virtual ``cluster`` is the queue. A job of n GPUs that a node cannot hold (n > the node's
GPUs, 8 by default) becomes a gang of ``w = ceil(n / 8)`` workers of ``ceil(n / w)`` GPUs:
12 → 2 × 6, 16 → 2 × 8, 24 → 3 × 8, 32 → 4 × 8 (exactly n for every size in the trace; at most
w - 1 GPUs more in general). ``gpu_time`` is checked but not used: the simulator re-derives it.
Ids are the data row's index in the file (0 = first row)."""

from __future__ import annotations

from datetime import datetime
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
from gpufleet.sim.traces.rows import Row, csv_rows

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def _timestamp(row: Row, column: str) -> float:
    raw = row.text(column)
    try:
        return float(raw)  # epoch seconds are accepted too
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        raise row.error(
            column, f"must be a date-time such as 2017-10-03 14:05:00, got {raw!r}"
        ) from None


def load_philly(path: str | Path, *, gpus_per_node: int = DEFAULT_GPUS_PER_NODE) -> list[TraceJob]:
    """Philly jobs; ids are the data row's index in the file (0 = first row)."""
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be at least 1")
    p = Path(path)
    jobs: list[TraceJob] = []
    for i, row in enumerate(csv_rows(p, PHILLY_COLUMNS)):
        submit = _timestamp(row, "timestamp")
        duration = row.number("duration")
        gpus = row.integer("num_gpus", minimum=1, maximum=MAX_GPUS_PER_JOB)
        row.number("gpu_time")
        queue = row.text("cluster")
        jid = str(i)
        jobs.append(TraceJob(jid, gpu_job(jid, jid, queue, gpus, gpus_per_node), submit, duration))
    return finish(jobs, str(p))


def _load(path: Path, options: LoadOptions) -> list[TraceJob]:
    return load_philly(path, gpus_per_node=options.gpus_per_node)


FORMAT = TraceFormat("philly", _load)
