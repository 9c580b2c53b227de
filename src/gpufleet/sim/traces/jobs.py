"""``jobs``: gpufleet's own format, the one the live controller exports from its history.

JSONL (one object per line; ``.jsonl``, ``.ndjson``, ``.json``) or CSV (``.csv``). Fields are
those of ``JobSpec.from_dict`` plus ``id``, ``submit_time``, ``duration_s`` and optional
``depends_on`` (``["afterok:ID", …]``) and ``checkpoint_interval_s`` (seconds of work between the
job's checkpoints: a preempted job resumes from its last; absent = the CLI's
``--checkpoint-interval``, else none). ``name`` defaults to the id and ``user`` to ``trace``.
In CSV, list cells (``gpu_models``, ``depends_on``, ``queues``) are ``|``-separated,
``topology`` is ``leaf`` or ``leaf:required``, ``env`` is ``K=V|K=V``; empty cells are absent.
A history (``gpufleet history export``) adds what happened, which the replay does not read
but keeps beside each job (``TraceJob.recorded``) to be compared with its own outcome:
``start_time`` (the first attempt's start), ``end_time``, ``state`` (the final one) and
``attempts``, all optional; its ``duration_s`` is ``end_time - start_time``. A job's
dependencies must be on earlier lines and submitted earlier."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet.model.checkpoint import check_interval
from gpufleet.model.errors import SpecError, each, every
from gpufleet.model.job import JobSpec
from gpufleet.sim.engine import Recorded, TraceJob
from gpufleet.sim.traces.loader import LoadOptions, TraceFormat, finish
from gpufleet.sim.traces.rows import csv_rows, open_text

# CSV cells are text: how to read each JobSpec field from one (everything else stays text)
_CSV_INTS = (
    "workers",
    "gpus_per_worker",
    "gpu_milli",
    "memory_mib",
    "priority",
    "max_retries",
    "attempts",
)
_CSV_FLOATS = (
    "cpus",
    "memory_gib",
    "time_limit_s",
    "submit_time",
    "duration_s",
    "checkpoint_interval_s",
    "start_time",
    "end_time",
)
_CSV_FLAGS = ("preemptible",)
_CSV_LISTS = ("gpu_models", "depends_on", "queues")


def load_jobs(path: str | Path) -> list[TraceJob]:
    """gpufleet's JSONL or CSV job history (by the file's suffix; JSONL unless ``.csv``)."""
    p = Path(path)
    _not_another_format(p)
    records = _csv_records(p) if p.suffix.lower() == ".csv" else _jsonl_records(p)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for line, record in records:
        job = _job_from_record(record, source=str(p), line=line)
        if job.id in seen:
            raise SpecError(
                f"job {job.id!r} is already on line {seen[job.id]}",
                source=str(p),
                field=f"line {line}: id",
            )
        for _, dep in job.depends_on:
            if dep not in seen:
                raise SpecError(
                    f"depends on job {dep!r}, which is not on an earlier line",
                    source=str(p),
                    field=f"line {line}: depends_on",
                )
        seen[job.id] = line
        jobs.append(job)
    out = finish(jobs, str(p))
    _check_dependency_order(out, seen, str(p))
    return out


def _not_another_format(path: Path) -> None:
    """The two files people hand ``--format jobs`` by mistake, said plainly."""
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            first = fh.readline().strip()
    except OSError:
        return  # the loader says why
    if first.lower().startswith("jobid|"):
        raise SpecError(
            "this is sacct output (--parsable2): read it with --format sacct",
            source=str(path),
            field="line 1",
        )
    if first.startswith("[") and path.suffix.lower() != ".csv":
        raise SpecError(
            "this is a JSON list (gpufleet jobs --json?), not one job per line: write the "
            "history with `gpufleet history export FILE`",
            source=str(path),
            field="line 1",
        )


def _check_dependency_order(
    jobs: Sequence[TraceJob], lines: Mapping[str, int], source: str
) -> None:
    """The controller needs a job's dependencies submitted first: refuse one submitted later."""
    submitted: set[str] = set()
    for j in jobs:
        for _, dep in j.depends_on:
            if dep not in submitted:
                raise SpecError(
                    f"depends on job {dep!r}, which is submitted later",
                    source=source,
                    field=f"line {lines[j.id]}: depends_on",
                )
        submitted.add(j.id)


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    with open_text(path) as fh:
        try:
            for n, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                try:
                    yield n, json.loads(text)
                except json.JSONDecodeError as exc:
                    raise SpecError(
                        f"not valid JSON: {exc.msg} (column {exc.colno})",
                        source=str(path),
                        field=f"line {n}",
                    ) from None
        except UnicodeDecodeError as exc:
            raise SpecError(f"not UTF-8 text: {exc}", source=str(path)) from None


def _csv_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for row in csv_rows(path, ("id", "submit_time", "duration_s"), other_columns=True):
        record: dict[str, Any] = {}
        for column, raw in row.cells.items():
            if raw == "":
                continue  # an empty cell is an absent field
            if column in _CSV_INTS:
                record[column] = row.integer(column, minimum=-(2**62))
            elif column in _CSV_FLOATS:
                record[column] = row.number(column, minimum=-math.inf)
            elif column in _CSV_FLAGS:
                low = raw.lower()
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise row.error(column, f"must be true or false, got {raw!r}")
                record[column] = low in ("true", "1", "yes")
            elif column in _CSV_LISTS:
                record[column] = [x.strip() for x in raw.split("|") if x.strip()]
            elif column == "topology":
                level, _, req = raw.partition(":")
                record[column] = {"level": level.strip(), "required": req.strip() == "required"}
            elif column == "env":
                pairs = [kv.partition("=") for kv in raw.split("|") if kv]
                record[column] = {k.strip(): v for k, _, v in pairs}
            else:
                record[column] = raw
        yield row.line, record


def _job_from_record(record: Any, *, source: str, line: int) -> TraceJob:
    where = f"line {line}"
    if not isinstance(record, dict):
        raise SpecError(
            f"expected an object, got {type(record).__name__}", source=source, field=where
        )
    data = dict(record)

    def err(column: str, message: str) -> SpecError:
        return SpecError(message, source=source, field=f"{where}: {column}")

    def number(key: str) -> float:
        v = data.pop(key, None)
        if v is None:
            raise err(key, "is required")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise err(key, f"must be a number, got {v!r}")
        if v < 0:
            raise err(key, f"must be at least 0, got {v}")
        return float(v)

    raw_id = data.pop("id", None)
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        raw_id = str(raw_id)
    if not isinstance(raw_id, str) or not raw_id.strip():
        raise err("id", f"must be a non-empty string, got {raw_id!r}")
    jid = raw_id.strip()
    submit = number("submit_time")
    duration = number("duration_s")
    deps = _dependencies(data.pop("depends_on", None), err)
    interval = check_interval(
        data.pop("checkpoint_interval_s", None),
        source=source,
        field=f"{where}: checkpoint_interval_s",
    )
    recorded = _recorded(data, submit, err)
    data.setdefault("name", jid)
    data.setdefault("user", "trace")
    try:
        spec = JobSpec.from_dict(data, source=source, path=where)
    except SpecError as e:
        # Fields names "line 3.workers": say "line 3: workers", as the CSV loaders do
        raise every([_at_line(x, source, where) for x in each(e)]) from None
    return TraceJob(jid, spec, submit, duration, deps, interval, recorded=recorded)


def _at_line(e: SpecError, source: str, where: str) -> SpecError:
    column = e.field[len(where) + 1 :] if e.field.startswith(where + ".") else e.field
    return SpecError(e.reason, source=source, field=f"{where}: {column}")


RECORDED_STATES = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")


def _recorded(
    data: dict[str, Any], submit: float, err: Callable[[str, str], SpecError]
) -> Recorded | None:
    """A history's own columns (popped from ``data``), checked against each other."""
    keys = ("start_time", "end_time", "state", "attempts")
    if not any(k in data for k in keys):
        return None
    times: dict[str, float | None] = {}
    for key in ("start_time", "end_time"):
        v = data.pop(key, None)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
        ):
            raise err(key, f"must be a number, got {v!r}")
        times[key] = None if v is None else float(v)
    start, end = times["start_time"], times["end_time"]
    if start is not None and start < submit:
        raise err("start_time", f"is before the job's submit_time ({start:g} < {submit:g})")
    if end is not None and start is not None and end < start:
        raise err("end_time", f"is before the job's start_time ({end:g} < {start:g})")
    state = data.pop("state", "")
    if not isinstance(state, str) or (state and state not in RECORDED_STATES):
        raise err("state", f"must be one of {', '.join(RECORDED_STATES)}, got {state!r}")
    attempts = data.pop("attempts", 0)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise err("attempts", f"must be a whole number ≥ 0, got {attempts!r}")
    return Recorded(start, end, state, attempts)


def _dependencies(raw: Any, err: Callable[[str, str], SpecError]) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise err("depends_on", f"must be a list such as ['afterok:12'], got {raw!r}")
    out = []
    for item in raw:
        kind, dep = ("afterok", "")
        if isinstance(item, str):
            kind, sep, dep = item.partition(":")
            if not sep:
                kind, dep = "afterok", item
        elif isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
            kind, dep = item
        if kind not in ("afterok", "afterany") or not dep.strip():
            raise err("depends_on", f"each must be afterok:ID or afterany:ID, got {item!r}")
        out.append((kind, dep.strip()))
    return tuple(out)


def _load(path: Path, options: LoadOptions) -> list[TraceJob]:
    return load_jobs(path)


FORMAT = TraceFormat("jobs", _load)
