"""Importers: the job histories people already have, as ``TraceJob`` lists (issue 14).

``load_trace(path, "sacct" | "pai" | "helios")`` reads them. Each job keeps what happened to it
(``TraceJob.recorded``: first start, end, final state) beside what it asked for, so that a
replay can be compared with the real schedule. Every importer replays only what ran: a job
that never started (cancelled while pending), one that has not ended, and a job without GPUs
(the replay is of the GPU workload, as in the traces' own papers) are left out and counted in
``notes``. A malformed cell is refused with ``SpecError(source=file, field="line N: column")``.

- ``sacct`` — Slurm's ``sacct --parsable2`` (or ``--parsable``: the trailing ``|`` is allowed),
  with its header, e.g. ``sacct -a -X -P -S 2025-01-01 -o JobID,JobName,User,Partition,State,
  Submit,Start,End,Elapsed,Timelimit,NNodes,AllocTRES,ReqTRES``. Required: JobID, Submit, Start,
  End and AllocTRES or ReqTRES. Steps (``123.batch``, ``123.extern``, ``123.0``) are skipped: the
  allocation's line is the job; array tasks (``123_4``) are jobs of their own; a pending array's
  ``123_[5-9]`` never started. ``Start``/``End`` of ``Unknown``, ``None`` or empty have not
  happened. GPUs are the ``gres/gpu=N`` of AllocTRES (what the job held), else of ReqTRES; a
  typed ``gres/gpu:a100=N`` counts when no untyped one is given (the model is not kept: it
  names the site's GRES, not a catalog GPU). ``cpu=`` and ``mem=`` are kept (``mem`` in K, M,
  G, T). The gang is ``NNodes`` workers of ``ceil(GPUs / NNodes)`` GPUs each. ``Timelimit``
  (``D-HH:MM:SS``, ``HH:MM:SS``, ``MM:SS``, minutes) becomes the job's time limit;
  ``UNLIMITED``, ``Partition_Limit`` and ``INVALID`` are none. The duration is End − Start
  (``Elapsed`` when one is missing). ``Partition`` is the queue (the first of a list), ``User``
  the user, ``JobName`` the name. State: ``COMPLETED`` is SUCCEEDED; ``CANCELLED`` (also
  ``CANCELLED by 123``) and ``PREEMPTED`` are CANCELLED; ``FAILED``, ``OUT_OF_MEMORY``,
  ``NODE_FAIL`` and ``BOOT_FAIL`` are FAILED; ``TIMEOUT`` and ``DEADLINE`` are TIMED_OUT; a job
  still ``RUNNING``, ``PENDING``, ``REQUEUED``, ``SUSPENDED``, … has not ended.
- ``pai`` — Alibaba's cluster-trace-gpu-v2020: ``path`` is ``pai_job_table.csv`` (or the
  folder holding it), and ``pai_task_table.csv`` beside it gives each job's tasks. The files
  are published without a header row (their columns are in ``*.header`` files): a first row
  that is the header is skipped. A job is submitted at its ``start_time`` (the trace's
  submission time), starts at its earliest task's ``start_time`` and ends at its latest task's
  ``end_time``. Its workers are the instances (``inst_num``) of its tasks that ask for GPUs;
  each worker asks for the largest ``plan_gpu`` of those tasks (percent of one GPU: 50 is half
  a GPU, a share; 800 is 8 GPUs), ``plan_cpu`` (percent of a core) and ``plan_mem`` (GB).
  ``status``: Terminated is SUCCEEDED, Failed is FAILED; Running and Waiting have not ended.
  There is no queue: every job is in ``default``; ``gpu_type`` is not kept.
- ``helios`` — SenseTime's Helios ``cluster_log.csv``: ``job_id, user, vc, gpu_num, cpu_num,
  node_num, state, submit_time, start_time, end_time, duration, queue``. The virtual cluster
  (``vc``) is the queue; the ``queue`` column is the job's time in the queue (seconds), not a
  queue. A gang of ``node_num`` workers of ``ceil(gpu_num / node_num)`` GPUs and
  ``cpu_num / node_num`` CPUs; the duration is ``end_time − start_time``. State: COMPLETED is
  SUCCEEDED, CANCELLED is CANCELLED, FAILED and NODE_FAIL are FAILED, TIMEOUT is TIMED_OUT.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

from gpufleet.io.slurm_values import UNLIMITED, time_seconds
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.sim.engine import Recorded, TraceJob
from gpufleet.sim.traces import MAX_GPUS_PER_JOB, _csv_rows, _finish, _Row

MAX_WORKERS = 4096
MAX_GPUS_PER_WORKER = 64


def _note(notes: list[str] | None, source: str, skipped: Counter[str]) -> None:
    if notes is None:
        return
    for why, n in sorted(skipped.items()):
        notes.append(f"{source}: left out {n:,} job(s): {why}")


def _gang(
    row: _Row, column: str, gpus: int, nodes: int
) -> tuple[int, int]:  # (workers, GPUs per worker)
    if gpus > MAX_GPUS_PER_JOB:
        raise row.error(column, f"must be at most {MAX_GPUS_PER_JOB} GPUs, got {gpus}")
    workers = min(max(1, nodes), gpus)
    per = math.ceil(gpus / workers)
    if per > MAX_GPUS_PER_WORKER or workers > MAX_WORKERS:
        workers = math.ceil(gpus / MAX_GPUS_PER_WORKER)
        per = math.ceil(gpus / workers)
    return workers, per


def _date(row: _Row, column: str) -> float | None:
    """A date-time cell; None for Slurm's Unknown, None and an empty cell."""
    raw = row.cells.get(column, "")
    if raw in ("", "Unknown", "None", "NaT", "nan"):
        return None
    try:
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        raise row.error(
            column, f"must be a date-time such as 2025-03-01T14:05:00, got {raw!r}"
        ) from None


# ---------------------------------------------------------------------------------------------
# Slurm: sacct --parsable2


SACCT_STATES = {
    "COMPLETED": "SUCCEEDED",
    "CANCELLED": "CANCELLED",
    "PREEMPTED": "CANCELLED",
    "FAILED": "FAILED",
    "OUT_OF_MEMORY": "FAILED",
    "NODE_FAIL": "FAILED",
    "BOOT_FAIL": "FAILED",
    "TIMEOUT": "TIMED_OUT",
    "DEADLINE": "TIMED_OUT",
}
SACCT_UNENDED = (
    "RUNNING",
    "PENDING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "REVOKED",
    "SUSPENDED",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "COMPLETING",
    "CONFIGURING",
    "SPECIAL_EXIT",
)
_SACCT_NO_LIMIT = ("unlimited", "partition_limit", "invalid", "none", "")
_JOBID = re.compile(r"\d+(?:_\d+|_\[[^\]]*\]|\+\d+)?")
_MEM = re.compile(r"(\d+(?:\.\d+)?)([KMGTP]?)", re.IGNORECASE)
_MEM_MIB = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def _tres(row: _Row, column: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in row.cells.get(column, "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise row.error(column, f"expected TRES as name=count pairs, got {item!r}")
        out[key.strip().lower()] = value.strip()
    return out


def _tres_gpus(row: _Row, column: str, tres: dict[str, str]) -> int:
    def count(key: str) -> int:
        raw = tres[key]
        if not raw.isdigit():
            raise row.error(column, f"{key} must be a whole number, got {raw!r}")
        return int(raw)

    if "gres/gpu" in tres:
        return count("gres/gpu")
    return sum(count(k) for k in tres if k.startswith("gres/gpu:"))


def _tres_mem_mib(row: _Row, column: str, raw: str) -> int:
    m = _MEM.fullmatch(raw)
    if not m:
        raise row.error(column, f"mem must be a size such as 64G or 500M, got {raw!r}")
    return math.ceil(float(m[1]) * _MEM_MIB[m[2].upper()])


def _slurm_seconds(row: _Row, column: str) -> float | None:
    raw = row.cells.get(column, "")
    if raw.lower() in _SACCT_NO_LIMIT:
        return None
    try:
        secs = time_seconds(raw)
    except ValueError:
        raise row.error(
            column, f"must be a time such as 2-00:00:00, 01:30:00 or UNLIMITED, got {raw!r}"
        ) from None
    return None if secs == UNLIMITED else float(secs)


def load_sacct(path: str | Path, *, notes: list[str] | None = None) -> list[TraceJob]:
    p = Path(path)
    source = str(p)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    skipped: Counter[str] = Counter()
    rows = _csv_rows(
        p, ("jobid", "submit", "start", "end"), other_columns=True, delimiter="|", fold_case=True
    )
    for row in rows:
        if "alloctres" not in row.cells and "reqtres" not in row.cells:
            raise SpecError(
                "missing column AllocTRES or ReqTRES (the GPUs a job held or asked for)",
                source=source,
                field="line 1",
            )
        jid = row.text("jobid")
        if "." in jid:
            continue  # a step (123.batch, 123.extern, 123.0): the allocation's line is the job
        if not _JOBID.fullmatch(jid):
            raise row.error("jobid", f"must be a Slurm job id such as 123 or 123_4, got {jid!r}")
        raw_state = row.cells.get("state", "COMPLETED")
        word = raw_state.split()[0].upper() if raw_state else "COMPLETED"
        if word not in SACCT_STATES and word not in SACCT_UNENDED:
            raise row.error("state", f"is not a Slurm job state: {raw_state!r}")
        submit = _date(row, "submit")
        if submit is None:
            raise row.error("submit", "is required: when the job was submitted")
        start, end = _date(row, "start"), _date(row, "end")
        if start is None:
            skipped["never started"] += 1
            continue
        if word in SACCT_UNENDED or (end is None and not row.cells.get("elapsed")):
            skipped["not ended"] += 1
            continue
        elapsed = _slurm_seconds(row, "elapsed") if row.cells.get("elapsed") else None
        if end is None:
            end = start + (elapsed or 0.0)
        if start < submit:
            raise row.error("start", "is before the job's Submit")
        if end < start:
            raise row.error("end", "is before the job's Start")
        tres_col = "alloctres" if row.cells.get("alloctres") else "reqtres"
        tres = _tres(row, tres_col)
        gpus = _tres_gpus(row, tres_col, tres)
        if gpus == 0:
            skipped["no GPUs"] += 1
            continue
        nodes = row.integer("nnodes", minimum=1) if row.cells.get("nnodes") else 1
        workers, per = _gang(row, tres_col, gpus, nodes)
        cpu = 0
        if "cpu" in tres:
            if not tres["cpu"].isdigit():
                raise row.error(tres_col, f"cpu must be a whole number, got {tres['cpu']!r}")
            cpu = math.ceil(int(tres["cpu"]) * MILLI / workers)
        mem = math.ceil(_tres_mem_mib(row, tres_col, tres["mem"]) / workers) if "mem" in tres else 0
        if jid in seen:
            raise row.error("jobid", f"job {jid!r} is already on line {seen[jid]}")
        seen[jid] = row.line
        spec = JobSpec(
            name=row.cells.get("jobname") or jid,
            user=row.cells.get("user") or "trace",
            queue=(row.cells.get("partition") or "default").split(",")[0],
            workers=workers,
            gpus_per_worker=per,
            cpu_milli=cpu,
            memory_mib=mem,
            time_limit_s=_slurm_seconds(row, "timelimit") if "timelimit" in row.cells else None,
        )
        rec = Recorded(start, end, SACCT_STATES[word])
        jobs.append(TraceJob(jid, spec, submit, end - start, recorded=rec))
    _note(notes, source, skipped)
    return _finish(jobs, source)


# ---------------------------------------------------------------------------------------------
# Alibaba PAI, cluster-trace-gpu-v2020


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


def _optional_number(row: _Row, column: str) -> float | None:
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
    tasks: dict[str, _PaiJob] = {}
    for row in _csv_rows(task_file, PAI_TASK_COLUMNS, default_header=PAI_TASK_COLUMNS):
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
    source = str(job_file)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    skipped: Counter[str] = Counter()
    for row in _csv_rows(job_file, PAI_JOB_COLUMNS, default_header=PAI_JOB_COLUMNS):
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
        if t.gpu < 100:
            per, milli = 1, max(1, round(t.gpu * MILLI / 100))
        else:
            per, milli = math.ceil(t.gpu / 100), MILLI
        if per > MAX_GPUS_PER_WORKER or t.workers > MAX_WORKERS:
            raise row.error(
                "job_name",
                f"its tasks ask for {t.workers} workers of {t.gpu:g}% GPU: more than a job may",
            )
        spec = JobSpec(
            name=name,
            user=row.cells.get("user") or "trace",
            workers=t.workers,
            gpus_per_worker=per,
            gpu_milli=milli,
            cpu_milli=math.ceil(t.cpu * MILLI / 100),
            memory_mib=math.ceil(t.mem * 1024),
        )
        rec = Recorded(start, end, PAI_STATES[status])
        jobs.append(TraceJob(name, spec, submit, end - start, recorded=rec))
    _note(notes, source, skipped)
    return _finish(jobs, source)


# ---------------------------------------------------------------------------------------------
# SenseTime Helios: cluster_log.csv


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
    for row in _csv_rows(p, HELIOS_REQUIRED, HELIOS_OPTIONAL):
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
        submit = _date(row, "submit_time")
        if submit is None:
            raise row.error("submit_time", "is required: when the job was submitted")
        start, end = _date(row, "start_time"), _date(row, "end_time")
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
        workers, per = _gang(row, "gpu_num", gpus, nodes)
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
    _note(notes, source, skipped)
    return _finish(jobs, source)
