"""``pai``: Alibaba's cluster-trace-gpu-v2020.

``path`` is ``pai_job_table.csv`` (or the folder holding it), and ``pai_task_table.csv`` beside
it gives each job's tasks. The files are published without a header row (their columns are in
``*.header`` files): a first row that is the header is skipped. A job is submitted at its
``start_time`` (the trace's submission time), starts at its earliest task's ``start_time`` and
ends at its latest task's ``end_time``. Its workers are the instances (``inst_num``) of its
tasks that ask for GPUs; each worker asks for the largest ``plan_gpu`` of those tasks (percent
of one GPU: 50 is half a GPU, a share; 800 is 8 GPUs), ``plan_cpu`` (percent of a core) and
``plan_mem`` (GB). ``status``: Terminated is SUCCEEDED, Failed is FAILED; Running and Waiting
have not ended. There is no queue: every job is in ``default``; ``gpu_type`` is not kept.

As for every importer, each job keeps what happened to it (``TraceJob.recorded``), and a job
that never started, has not ended or asks for no GPU is left out and counted in the notes."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.sim.engine import Recorded, TraceJob
from gpufleet.sim.traces.loader import (
    MAX_GPUS_PER_WORKER,
    MAX_WORKERS,
    LoadOptions,
    TraceFormat,
    finish,
    note_skipped,
)
from gpufleet.sim.traces.rows import Row, csv_rows

PAI_JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
PAI_TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
PAI_STATES = {"Terminated": "SUCCEEDED", "Failed": "FAILED"}
PAI_UNENDED = ("Running", "Waiting")


class _PaiJob:
    __slots__ = ("cpu", "end", "gpu", "mem", "start", "workers")

    def __init__(self) -> None:
        self.start: float | None = None
        self.end: float | None = None
        self.workers = 0
        self.gpu = 0.0  # percent of one GPU, per worker
        self.cpu = 0.0  # percent of one core, per worker
        self.mem = 0.0  # GB per worker


def _optional_number(row: Row, column: str) -> float | None:
    raw = row.cells.get(column, "")
    if raw in ("", "nan", "NaN", "None"):
        return None
    return row.number(column)


def load_pai(
    path: str | Path, *, gpus_per_node: int = 8, notes: list[str] | None = None
) -> list[TraceJob]:
    """``gpus_per_node``: unused (a PAI worker is an instance, whatever its node)."""
    p = Path(path)
    job_file = p / "pai_job_table.csv" if p.is_dir() else p
    task_file = job_file.with_name(job_file.name.replace("job_table", "task_table"))
    if task_file == job_file or not task_file.exists():
        raise SpecError(
            f"the PAI trace needs its task table beside the job table: {task_file} not found",
            source=str(job_file),
        )
    tasks = _read_tasks(task_file)
    source = str(job_file)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    skipped: Counter[str] = Counter()
    for row in csv_rows(job_file, PAI_JOB_COLUMNS, default_header=PAI_JOB_COLUMNS):
        name = row.text("job_name")
        if name in seen:
            raise row.error("job_name", f"job {name!r} is already on line {seen[name]}")
        seen[name] = row.line
        status = row.text("status")
        if status in PAI_UNENDED:
            skipped["not ended"] += 1
            continue
        if status not in PAI_STATES:
            raise row.error(
                "status", f"must be Terminated, Failed, Running or Waiting, got {status!r}"
            )
        submit = row.number("start_time")
        t = tasks.get(name)
        if t is None or t.start is None:
            skipped["never started (no task started)"] += 1
            continue
        if t.workers == 0:
            skipped["no GPUs"] += 1
            continue
        end = _optional_number(row, "end_time")
        end = end if end is not None else t.end
        if end is None:
            skipped["not ended"] += 1
            continue
        start = max(t.start, submit)  # a task's clock may run a little ahead of the job's
        if end < start:
            raise row.error("end_time", f"is before the job's first task started ({start:g})")
        spec = _spec(row, name, t)
        rec = Recorded(start, end, PAI_STATES[status])
        jobs.append(TraceJob(name, spec, submit, end - start, recorded=rec))
    note_skipped(notes, source, skipped)
    return finish(jobs, source)


def _spec(row: Row, name: str, t: _PaiJob) -> JobSpec:
    """The job's spec: its GPU workers, each the largest GPU, CPU and memory of its tasks."""
    if t.gpu < 100:
        per, milli = 1, max(1, round(t.gpu * MILLI / 100))
    else:
        per, milli = math.ceil(t.gpu / 100), MILLI
    if per > MAX_GPUS_PER_WORKER or t.workers > MAX_WORKERS:
        raise row.error(
            "job_name",
            f"its tasks ask for {t.workers} workers of {t.gpu:g}% GPU: more than a job may",
        )
    return JobSpec(
        name=name,
        user=row.cells.get("user") or "trace",
        workers=t.workers,
        gpus_per_worker=per,
        gpu_milli=milli,
        cpu_milli=math.ceil(t.cpu * MILLI / 100),
        memory_mib=math.ceil(t.mem * 1024),
    )


def _read_tasks(task_file: Path) -> dict[str, _PaiJob]:
    """Each job's first task start, last task end, and its GPU workers' largest requests."""
    tasks: dict[str, _PaiJob] = {}
    for row in csv_rows(task_file, PAI_TASK_COLUMNS, default_header=PAI_TASK_COLUMNS):
        name = row.text("job_name")
        t = tasks.setdefault(name, _PaiJob())
        start, end = _optional_number(row, "start_time"), _optional_number(row, "end_time")
        if start is not None:
            t.start = start if t.start is None else min(t.start, start)
        if end is not None:
            t.end = end if t.end is None else max(t.end, end)
        gpu = _optional_number(row, "plan_gpu") or 0.0
        if gpu <= 0:
            continue
        inst = _optional_number(row, "inst_num")
        if inst is not None and not inst.is_integer():
            raise row.error("inst_num", f"must be a whole number, got {row.cells['inst_num']!r}")
        t.workers += int(inst) if inst is not None else 1
        t.gpu = max(t.gpu, gpu)
        t.cpu = max(t.cpu, _optional_number(row, "plan_cpu") or 0.0)
        t.mem = max(t.mem, _optional_number(row, "plan_mem") or 0.0)
    return tasks


def _load(path: Path, options: LoadOptions) -> list[TraceJob]:
    return load_pai(path, gpus_per_node=options.gpus_per_node, notes=options.notes)


FORMAT = TraceFormat("pai", _load)
