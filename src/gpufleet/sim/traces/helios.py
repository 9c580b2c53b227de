"""``helios``: SenseTime's Helios ``cluster_log.csv``: ``job_id, user, vc, gpu_num, cpu_num,
node_num, state, submit_time, start_time, end_time, duration, queue``.

The virtual cluster (``vc``) is the queue; the ``queue`` column is the job's time in the queue
(seconds), not a queue. A gang of ``node_num`` workers of ``ceil(gpu_num / node_num)`` GPUs and
``cpu_num / node_num`` CPUs; the duration is ``end_time − start_time``. State: COMPLETED is
SUCCEEDED, CANCELLED is CANCELLED, FAILED and NODE_FAIL are FAILED, TIMEOUT is TIMED_OUT.

As for every importer, each job keeps what happened to it (``TraceJob.recorded``), and a job
that never started, has not ended or asks for no GPU is left out and counted in the notes."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.sim.engine import Recorded, TraceJob
from gpufleet.sim.traces.loader import (
    MAX_GPUS_PER_JOB,
    LoadOptions,
    TraceFormat,
    finish,
    gang,
    note_skipped,
)
from gpufleet.sim.traces.rows import csv_rows, date_cell

HELIOS_REQUIRED = ("job_id", "gpu_num", "node_num", "submit_time", "start_time", "end_time")
HELIOS_OPTIONAL = ("user", "vc", "cpu_num", "state", "duration", "queue", "jobname")
HELIOS_STATES = {
    "COMPLETED": "SUCCEEDED",
    "CANCELLED": "CANCELLED",
    "FAILED": "FAILED",
    "NODE_FAIL": "FAILED",
    "TIMEOUT": "TIMED_OUT",
}
HELIOS_UNENDED = ("RUNNING", "PENDING", "SUSPENDED")


def load_helios(path: str | Path, *, notes: list[str] | None = None) -> list[TraceJob]:
    p = Path(path)
    source = str(p)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    skipped: Counter[str] = Counter()
    for row in csv_rows(p, HELIOS_REQUIRED, HELIOS_OPTIONAL):
        jid = row.text("job_id")
        if jid in seen:
            raise row.error("job_id", f"job {jid!r} is already on line {seen[jid]}")
        seen[jid] = row.line
        state = (row.cells.get("state") or "COMPLETED").upper()
        if state in HELIOS_UNENDED:
            skipped["not ended"] += 1
            continue
        if state not in HELIOS_STATES:
            raise row.error(
                "state", f"must be one of {', '.join(HELIOS_STATES)}, got {row.cells['state']!r}"
            )
        gpus = row.integer("gpu_num", maximum=MAX_GPUS_PER_JOB)
        nodes = row.integer("node_num")
        cpus = row.number("cpu_num") if row.cells.get("cpu_num") else 0.0
        submit = date_cell(row, "submit_time")
        if submit is None:
            raise row.error("submit_time", "is required: when the job was submitted")
        start, end = date_cell(row, "start_time"), date_cell(row, "end_time")
        if start is None:
            skipped["never started"] += 1
            continue
        if end is None:
            skipped["not ended"] += 1
            continue
        if gpus == 0:
            skipped["no GPUs"] += 1
            continue
        if start < submit:
            raise row.error("start_time", "is before the job's submit_time")
        if end < start:
            raise row.error("end_time", "is before the job's start_time")
        workers, per = gang(row, "gpu_num", gpus, nodes)
        spec = JobSpec(
            name=row.cells.get("jobname") or jid,
            user=row.cells.get("user") or "trace",
            queue=row.cells.get("vc") or "default",
            workers=workers,
            gpus_per_worker=per,
            cpu_milli=math.ceil(cpus * MILLI / workers),
            memory_mib=0,
        )
        jobs.append(
            TraceJob(
                jid, spec, submit, end - start, recorded=Recorded(start, end, HELIOS_STATES[state])
            )
        )
    note_skipped(notes, source, skipped)
    return finish(jobs, source)


def _load(path: Path, options: LoadOptions) -> list[TraceJob]:
    return load_helios(path, notes=options.notes)


FORMAT = TraceFormat("helios", _load)
