"""``sacct``: Slurm's ``sacct --parsable2`` (or ``--parsable``: the trailing ``|`` is allowed),
with its header, e.g. ``sacct -a -X -P -S 2025-01-01 -o JobID,JobName,User,Partition,State,
Submit,Start,End,Elapsed,Timelimit,NNodes,AllocTRES,ReqTRES``.

Required: JobID, Submit, Start, End and AllocTRES or ReqTRES. Steps (``123.batch``,
``123.extern``, ``123.0``) are skipped: the allocation's line is the job; array tasks
(``123_4``) are jobs of their own; a pending array's ``123_[5-9]`` never started.
``Start``/``End`` of ``Unknown``, ``None`` or empty have not happened. GPUs are the
``gres/gpu=N`` of AllocTRES (what the job held), else of ReqTRES; a typed ``gres/gpu:a100=N``
counts when no untyped one is given (the model is not kept: it names the site's GRES, not a
catalog GPU). ``cpu=`` and ``mem=`` are kept (``mem`` in K, M, G, T). The gang is ``NNodes``
workers of ``ceil(GPUs / NNodes)`` GPUs each. ``Timelimit`` (``D-HH:MM:SS``, ``HH:MM:SS``,
``MM:SS``, minutes) becomes the job's time limit; ``UNLIMITED``, ``Partition_Limit`` and
``INVALID`` are none. The duration is End − Start (``Elapsed`` when one is missing).
``Partition`` is the queue (the first of a list), ``User`` the user, ``JobName`` the name.
State: ``COMPLETED`` is SUCCEEDED; ``CANCELLED`` (also ``CANCELLED by 123``) and ``PREEMPTED``
are CANCELLED; ``FAILED``, ``OUT_OF_MEMORY``, ``NODE_FAIL`` and ``BOOT_FAIL`` are FAILED;
``TIMEOUT`` and ``DEADLINE`` are TIMED_OUT; a job still ``RUNNING``, ``PENDING``,
``REQUEUED``, ``SUSPENDED``, … has not ended.

Like every importer of a job history, each job keeps what happened to it
(``TraceJob.recorded``: first start, end, final state) beside what it asked for, so that a
replay can be compared with the real schedule; only what ran is replayed: a job that never
started, one that has not ended and one without GPUs are left out and counted in the notes."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

from gpufleet.io.slurm_values import UNLIMITED, time_seconds
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.sim.engine import Recorded, TraceJob
from gpufleet.sim.traces.loader import LoadOptions, TraceFormat, finish, gang, note_skipped
from gpufleet.sim.traces.rows import Row, csv_rows, date_cell

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


def _tres(row: Row, column: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in row.cells.get(column, "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise row.error(column, f"expected TRES as name=count pairs, got {item!r}")
        out[key.strip().lower()] = value.strip()
    return out


def _tres_gpus(row: Row, column: str, tres: dict[str, str]) -> int:
    def count(key: str) -> int:
        raw = tres[key]
        if not raw.isdigit():
            raise row.error(column, f"{key} must be a whole number, got {raw!r}")
        return int(raw)

    if "gres/gpu" in tres:
        return count("gres/gpu")
    return sum(count(k) for k in tres if k.startswith("gres/gpu:"))


def _tres_mem_mib(row: Row, column: str, raw: str) -> int:
    m = _MEM.fullmatch(raw)
    if not m:
        raise row.error(column, f"mem must be a size such as 64G or 500M, got {raw!r}")
    return math.ceil(float(m[1]) * _MEM_MIB[m[2].upper()])


def _slurm_seconds(row: Row, column: str) -> float | None:
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
    rows = csv_rows(
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
        submit = date_cell(row, "submit")
        if submit is None:
            raise row.error("submit", "is required: when the job was submitted")
        start, end = date_cell(row, "start"), date_cell(row, "end")
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
        workers, per = gang(row, tres_col, gpus, nodes)
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
    note_skipped(notes, source, skipped)
    return finish(jobs, source)


def _load(path: Path, options: LoadOptions) -> list[TraceJob]:
    return load_sacct(path, notes=options.notes)


FORMAT = TraceFormat("sacct", _load)
