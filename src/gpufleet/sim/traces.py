"""Trace loaders: real GPU-cluster workloads as ``TraceJob`` lists for the simulator.

Formats (``load_trace(path, fmt)``):

- ``philly`` — ``timestamp,duration,num_gpus,gpu_time,cluster`` (Microsoft Philly, via Pollux).
  The virtual ``cluster`` is the queue. A job of n GPUs that a node cannot hold (n > the node's
  GPUs, 8 by default) becomes a gang of ``w = ceil(n / 8)`` workers of ``ceil(n / w)`` GPUs:
  12 → 2 × 6, 16 → 2 × 8, 24 → 3 × 8, 32 → 4 × 8 (exactly n for every size in the trace; at most
  w - 1 GPUs more in general). ``gpu_time`` is checked but not used: the simulator re-derives it.
- ``tiresias`` — ``job_id,num_gpu,submit_time,duration`` (plus the ignored ``iterations,
  model_name,interval``). All jobs go to queue ``default``; ``model_name`` is the job's name.
- ``jobs`` — gpufleet's own format, the one the live controller exports from its history: JSONL
  (one object per line; ``.jsonl``, ``.ndjson``, ``.json``) or CSV (``.csv``). Fields are those of
  ``JobSpec.from_dict`` plus ``id``, ``submit_time``, ``duration_s`` and optional ``depends_on``
  (``["afterok:ID", …]``) and ``checkpoint_interval_s`` (seconds of work between the job's
  checkpoints: a preempted job resumes from its last; absent = the CLI's
  ``--checkpoint-interval``, else none). ``name`` defaults to the id and ``user`` to ``trace``.
  In CSV, list cells (``gpu_models``, ``depends_on``, ``queues``) are ``|``-separated,
  ``topology`` is ``leaf`` or ``leaf:required``, ``env`` is ``K=V|K=V``; empty cells are absent.
  A history (``gpufleet history export``) adds what happened, which the replay does not read
  but keeps beside each job (``TraceJob.recorded``) to be compared with its own outcome:
  ``start_time`` (the first attempt's start), ``end_time``, ``state`` (the final one) and
  ``attempts``, all optional; its ``duration_s`` is ``end_time - start_time``.
- ``openb`` — Alibaba's openb pod list with its timing columns: a pod is a one-worker job that
  arrives at ``creation_time`` and runs ``deletion_time - scheduled_time`` seconds (a pod the real
  cluster never scheduled runs ``deletion_time - creation_time``). Fractional ``gpu_milli`` and
  ``gpu_spec`` model constraints are kept.

Every loader refuses a malformed row with ``SpecError(source=file, field="line N: column")``,
accepts rows in any order (sorted by submit time, stably, so equal times keep file order) and
shifts times so that the first submission is at t = 0.

Trace jobs ask for GPUs only (``cpu_milli = memory_mib = 0``) unless the format says more (jobs,
openb): the GPU traces record no CPU or memory, and an invented figure would make the replay
depend on it.

Time limits (``TimeLimit``; the CLI's ``--time-limit``): ``auto`` (the default) keeps a limit the
trace gives (only ``jobs`` files can) and otherwise sets the exact duration; ``exact`` sets every
job's limit to its duration; ``none`` removes them; a number f sets f × duration. ``exact`` is the
default because EASY backfill needs an end time for every running job, and the traces record no
requested limits: the exact duration is the idealised setting most trace studies of backfill
use, and it never cuts a job. Users' real estimates are poorer; ``--time-limit 2`` or more models
them. With a restart overhead, the limit also covers it (``slack_s``), so a resumed job is not
cut by the overhead alone.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from gpufleet.model.checkpoint import check_interval
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.sim.engine import Recorded, TraceJob

FORMATS = ("philly", "tiresias", "jobs", "openb", "sacct", "pai", "helios")
DEFAULT_GPUS_PER_NODE = 8
MAX_GPUS_PER_JOB = 4096 * 64  # JobSpec's own bounds: 4096 workers × 64 GPUs


# ---------------------------------------------------------------------------------------------
# time limits


@dataclass(frozen=True, slots=True)
class TimeLimit:
    """How each job's time limit is set: ``auto``, ``exact``, ``none`` or ``factor`` × duration."""

    mode: str = "auto"
    factor: float = 1.0

    @staticmethod
    def parse(text: str) -> TimeLimit:
        t = text.strip().lower()
        if t in ("auto", "exact", "none"):
            return TimeLimit(t)
        try:
            f = float(t)
        except ValueError:
            raise SpecError(
                f"must be auto, exact, none or a factor such as 1.5; got {text!r}",
                field="--time-limit",
            ) from None
        if not math.isfinite(f) or f <= 0:
            raise SpecError(
                f"a factor must be a positive number, got {text!r}", field="--time-limit"
            )
        return TimeLimit("factor", f)

    def describe(self) -> str:
        return f"{self.factor:g} × duration" if self.mode == "factor" else self.mode

    def limit_for(self, job: TraceJob, slack_s: float = 0.0) -> float | None:
        if self.mode == "none":
            return None
        if self.mode == "auto" and job.spec.time_limit_s is not None:
            return job.spec.time_limit_s
        factor = self.factor if self.mode == "factor" else 1.0
        # a zero limit means "none" to JobSpec: keep a tiny positive one for zero-length jobs
        return max(factor * job.duration_s + slack_s, 1e-6)


def apply_time_limits(
    jobs: Sequence[TraceJob], policy: TimeLimit, slack_s: float = 0.0
) -> list[TraceJob]:
    """The jobs with their limits set by ``policy`` (``slack_s`` added to derived limits)."""
    out = []
    for j in jobs:
        limit = policy.limit_for(j, slack_s)
        out.append(
            j
            if limit == j.spec.time_limit_s
            else replace(j, spec=replace(j.spec, time_limit_s=limit))
        )
    return out


# ---------------------------------------------------------------------------------------------
# entry point


def load_trace(
    path: str | Path,
    fmt: str,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    notes: list[str] | None = None,
) -> list[TraceJob]:
    """The jobs of ``path`` in format ``fmt``, sorted by submit time, first at t = 0.

    ``notes``: what an importer left out and why (jobs that never ran, CPU-only jobs, steps),
    one line each, for the caller to show."""
    from gpufleet.sim import importers

    said = notes if notes is not None else []
    loaders: dict[str, Callable[[Path], list[TraceJob]]] = {
        "philly": lambda p: load_philly(p, gpus_per_node=gpus_per_node),
        "tiresias": lambda p: load_tiresias(p, gpus_per_node=gpus_per_node),
        "jobs": load_jobs,
        "openb": load_openb_jobs,
        "sacct": lambda p: importers.load_sacct(p, notes=said),
        "pai": lambda p: importers.load_pai(p, gpus_per_node=gpus_per_node, notes=said),
        "helios": lambda p: importers.load_helios(p, notes=said),
    }
    loader = loaders.get(fmt)
    if loader is None:
        raise SpecError(
            f"unknown trace format {fmt!r} (one of {', '.join(FORMATS)})", field="--format"
        )
    return loader(Path(path))


def _finish(jobs: list[TraceJob], source: str) -> list[TraceJob]:
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


# ---------------------------------------------------------------------------------------------
# CSV reading with file, line and column in every error


class _Row:
    """One CSV row and where it came from; the readers raise SpecError naming the column."""

    def __init__(
        self,
        source: str,
        line: int,
        cells: dict[str, str],
        names: Mapping[str, str] | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.cells = cells
        self.names = names or {}  # a column's name as the file writes it, by its key

    def error(self, column: str, message: str) -> SpecError:
        name = self.names.get(column, column)
        return SpecError(message, source=self.source, field=f"line {self.line}: {name}")

    def text(self, column: str, *, required: bool = True) -> str:
        v = self.cells.get(column, "")
        if not v and required:
            raise self.error(column, "is empty; a value is required")
        return v

    def number(self, column: str, *, minimum: float = 0.0) -> float:
        raw = self.text(column)
        try:
            v = float(raw)
        except ValueError:
            raise self.error(column, f"must be a number, got {raw!r}") from None
        if not math.isfinite(v):
            raise self.error(column, f"must be a finite number, got {raw!r}")
        if v < minimum:
            raise self.error(column, f"must be at least {minimum:g}, got {raw}")
        return v

    def integer(self, column: str, *, minimum: int = 0, maximum: int | None = None) -> int:
        raw = self.text(column)
        try:
            v = int(raw)
        except ValueError:
            try:
                f = float(raw)
            except ValueError:
                f = math.nan
            if not f.is_integer():
                raise self.error(column, f"must be an integer, got {raw!r}") from None
            v = int(f)  # "8.0" is 8
        if v < minimum:
            raise self.error(column, f"must be at least {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise self.error(column, f"must be at most {maximum}, got {v}")
        return v


def _open(path: Path) -> Any:
    try:
        return path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror or exc}", source=str(path)) from None


def _csv_rows(
    path: Path,
    required: Sequence[str],
    optional: Sequence[str] = (),
    *,
    other_columns: bool = False,
    delimiter: str = ",",
    fold_case: bool = False,
    default_header: Sequence[str] | None = None,
) -> Iterator[_Row]:
    """The data rows of a CSV file, after checking its header (``other_columns``: columns
    beyond ``required`` and ``optional`` are let through, for the caller to judge;
    ``fold_case``: header names are compared in lower case, as the cells are then keyed;
    ``default_header``: a file whose first row is not this header has none, and is read
    with it, its first row being data)."""
    source = str(path)
    with _open(path) as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            first = next(reader)
        except StopIteration:
            raise SpecError("the file is empty (no header row)", source=source) from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise SpecError(f"not a CSV file: {exc}", source=source, field="line 1") from None
        header = [h.strip().lower() if fold_case else h.strip() for h in first]
        names = {h.strip().lower(): h.strip() for h in first} if fold_case else None
        pending: list[list[str]] = []
        if default_header is not None and header[: len(default_header)] != list(default_header):
            header, pending = list(default_header), [first]
        missing = [c for c in required if c not in header]
        if missing:
            raise SpecError(
                f"missing column(s) {', '.join(missing)}; the header is {', '.join(header)}",
                source=source,
                field="line 1",
            )
        known = set(required) | set(optional)
        unknown = [h for h in header if h not in known]
        if unknown and not other_columns:
            raise SpecError(
                f"unknown column(s) {', '.join(unknown)} (expected {', '.join(required)}"
                + (f"; optional {', '.join(optional)})" if optional else ")"),
                source=source,
                field="line 1",
            )
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise SpecError(
                f"duplicate column(s) {', '.join(dupes)}", source=source, field="line 1"
            )
        try:
            for values in _chain(pending, reader):
                if not values or all(not v.strip() for v in values):
                    continue
                if len(values) != len(header):
                    raise SpecError(
                        f"expected {len(header)} fields, got {len(values)}",
                        source=source,
                        field=f"line {reader.line_num}",
                    )
                cells = {h: v.strip() for h, v in zip(header, values, strict=True)}
                yield _Row(source, reader.line_num, cells, names)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise SpecError(
                f"unreadable CSV: {exc}", source=source, field=f"line {reader.line_num + 1}"
            ) from None


def _chain(first: list[list[str]], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield from first
    yield from rest


def _gpu_job(
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


# ---------------------------------------------------------------------------------------------
# philly


PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def _timestamp(row: _Row, column: str) -> float:
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
    for i, row in enumerate(_csv_rows(p, PHILLY_COLUMNS)):
        submit = _timestamp(row, "timestamp")
        duration = row.number("duration")
        gpus = row.integer("num_gpus", minimum=1, maximum=MAX_GPUS_PER_JOB)
        row.number("gpu_time")
        queue = row.text("cluster")
        jid = str(i)
        jobs.append(TraceJob(jid, _gpu_job(jid, jid, queue, gpus, gpus_per_node), submit, duration))
    return _finish(jobs, str(p))


# ---------------------------------------------------------------------------------------------
# tiresias


TIRESIAS_REQUIRED = ("job_id", "num_gpu", "submit_time", "duration")
TIRESIAS_OPTIONAL = ("iterations", "model_name", "interval")


def load_tiresias(
    path: str | Path, *, gpus_per_node: int = DEFAULT_GPUS_PER_NODE
) -> list[TraceJob]:
    p = Path(path)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for row in _csv_rows(p, TIRESIAS_REQUIRED, TIRESIAS_OPTIONAL):
        jid = row.text("job_id")
        if jid in seen:
            raise row.error("job_id", f"job {jid!r} is already on line {seen[jid]}")
        seen[jid] = row.line
        gpus = row.integer("num_gpu", minimum=1, maximum=MAX_GPUS_PER_JOB)
        submit = row.number("submit_time")
        duration = row.number("duration")
        name = row.text("model_name", required=False) or jid
        spec = _gpu_job(jid, name, "default", gpus, gpus_per_node)
        jobs.append(TraceJob(jid, spec, submit, duration))
    return _finish(jobs, str(p))


# ---------------------------------------------------------------------------------------------
# openb pods as jobs


OPENB_REQUIRED = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "creation_time",
    "deletion_time",
)
OPENB_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "scheduled_time")


def load_openb_jobs(path: str | Path) -> list[TraceJob]:
    """openb pods with their lifetimes as one-worker jobs; queue = the pod's ``qos`` class."""
    p = Path(path)
    header = _header(p)
    if "creation_time" not in header or "deletion_time" not in header:
        raise SpecError(
            "this pod list has no creation_time/deletion_time columns, so it cannot be replayed "
            "over time (the fill experiment, `gpufleet simulate fill`, needs none)",
            source=str(p),
            field="line 1",
        )
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for row in _csv_rows(p, OPENB_REQUIRED, OPENB_OPTIONAL):
        name = row.text("name")
        if name in seen:
            raise row.error("name", f"pod {name!r} is already on line {seen[name]}")
        seen[name] = row.line
        cpu = row.integer("cpu_milli")
        mem = row.integer("memory_mib")
        gpus = row.integer("num_gpu", maximum=64)
        milli = MILLI
        if gpus:
            milli = min(row.integer("gpu_milli", minimum=1), MILLI)
            if gpus > 1 and milli < MILLI:
                raise row.error(
                    "gpu_milli", f"a pod with num_gpu={gpus} must ask for whole GPUs, got {milli}"
                )
        created = row.number("creation_time")
        deleted = row.number("deletion_time")
        started = row.number("scheduled_time") if row.cells.get("scheduled_time") else created
        if deleted < started:
            raise row.error(
                "deletion_time", f"is before the pod started ({deleted:g} < {started:g})"
            )
        models = tuple(m.strip() for m in row.text("gpu_spec", required=False).split("|") if m)
        spec = JobSpec(
            name=name,
            user="trace",
            queue=row.text("qos", required=False) or "default",
            gpus_per_worker=gpus,
            gpu_milli=milli,
            cpu_milli=cpu,
            memory_mib=mem,
            gpu_models=models if gpus else (),
        )
        jobs.append(TraceJob(name, spec, created, deleted - started))
    return _finish(jobs, str(p))


def _header(path: Path) -> list[str]:
    with _open(path) as fh:
        first = fh.readline()
    return [h.strip() for h in first.strip().split(",")]


# ---------------------------------------------------------------------------------------------
# gpufleet's own jobs format


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
    out = _finish(jobs, str(p))
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
    with _open(path) as fh:
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
    for row in _csv_rows(path, ("id", "submit_time", "duration_s"), other_columns=True):
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
        column = e.field[len(where) + 1 :] if e.field.startswith(where + ".") else e.field
        raise SpecError(e.reason, source=source, field=f"{where}: {column}") from None
    return TraceJob(jid, spec, submit, duration, deps, interval, recorded=recorded)


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
