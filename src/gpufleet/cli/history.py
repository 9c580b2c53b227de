"""``gpufleet history export``: the controller's job history as a trace the simulator replays.

The file is the simulator's ``jobs`` format (``gpufleet simulate replay --format jobs``): JSONL,
or CSV when FILE ends in ``.csv``. One record per job that ran and has ended: its id, name,
user, queue (and ``queues``, a partition list, with queue the one it ran in), gang shape
(``workers``, ``gpus_per_worker``, ``gpu_milli``), ``cpus`` and ``memory_mib`` per worker, GPU
models, time limit, priority, preemptibility, topology and retries, then what happened:
``submit_time``, ``start_time`` (the first attempt's start), ``end_time``, ``state`` (the final
one), ``attempts`` and ``duration_s`` = end − first start (a retried job's failed attempts and
back-off are inside it). Times are the controller's clock, seconds since the epoch; the loader
shifts them so that the first submission is at t = 0.

Left out, and counted on stderr: jobs that never started (cancelled while pending: they held
no GPU, and there is no duration to replay) and jobs that have not ended yet (pending, running,
or failed with a retry to come). Commands and environments are not written: the simulator
needs neither, and an environment may hold what its owner would not share. Dependencies are
not in the job listing, so they are not written either.

``--since``/``--until`` select by submit time (``since <= submit < until``), in the forms
``gpufleet accounting`` takes. The jobs come from ``GET /jobs?all=true`` page by page (its
``Link: rel=next`` cursor); a job with more than one attempt costs one ``GET /jobs/{id}`` more,
for the first attempt's start in its events.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.api import schemas as s
from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.client.http import Client

app = typer.Typer(no_args_is_help=True)

ENDED = frozenset({"SUCCEEDED", "CANCELLED", "TIMED_OUT"})
# the columns of a CSV export, in this order (a JSONL record leaves absent ones out)
COLUMNS = (
    "id",
    "name",
    "user",
    "queue",
    "queues",
    "workers",
    "gpus_per_worker",
    "gpu_milli",
    "cpus",
    "memory_mib",
    "gpu_models",
    "time_limit_s",
    "priority",
    "preemptible",
    "topology",
    "max_retries",
    "submit_time",
    "start_time",
    "end_time",
    "duration_s",
    "state",
    "attempts",
)


def has_ended(job: s.JobOut) -> bool:
    """Ended for good: a FAILED job with a retry left will run again."""
    if job.state in ENDED:
        return True
    retries = job.spec.get("max_retries", 0)
    return job.state == "FAILED" and job.retries_used >= (
        retries if isinstance(retries, int) else 0
    )


def first_start(job: s.JobOut, events: Sequence[s.EventOut] | None) -> float | None:
    """When the job's first attempt started: ``start_time`` is the current attempt's."""
    if job.attempt <= 1 or not events:
        return job.start_time
    starts = [e.time for e in events if e.state == "STARTING"]
    return min(starts) if starts else job.start_time


def history_record(job: s.JobOut, started: float) -> dict[str, Any]:
    """One job's line of the history (``started``: its first attempt's start)."""
    sp = job.spec
    assert job.end_time is not None
    rec: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "user": job.user,
        "queue": job.queue,
    }
    if sp.get("queues"):  # Slurm's partition list: queue is the one it ran in
        rec["queues"] = list(sp["queues"])
    rec |= {
        "workers": job.workers,
        "gpus_per_worker": sp.get("gpus_per_worker", 1),
        "gpu_milli": sp.get("gpu_milli", 1000),
        "cpus": sp.get("cpu_milli", 1000) / 1000,
        "memory_mib": sp.get("memory_mib", 4096),
    }
    if sp.get("gpu_models"):
        rec["gpu_models"] = list(sp["gpu_models"])
    if sp.get("time_limit_s") is not None:
        rec["time_limit_s"] = sp["time_limit_s"]
    rec["priority"] = sp.get("priority", 0)
    rec["preemptible"] = sp.get("preemptible", True)
    topo = sp.get("topology") or {}
    if topo.get("level", "any") != "any":
        rec["topology"] = {"level": topo["level"], "required": bool(topo.get("required"))}
    rec["max_retries"] = sp.get("max_retries", 0)
    rec["submit_time"] = job.submit_time
    rec["start_time"] = started
    rec["end_time"] = job.end_time
    rec["duration_s"] = max(0.0, job.end_time - started)
    rec["state"] = job.state
    rec["attempts"] = job.attempt
    return rec


@dataclass
class Export:
    records: list[dict[str, Any]]
    never_started: int = 0
    not_ended: int = 0


def collect(
    client: Client, jobs: Iterable[s.JobOut], since: float | None, until: float | None
) -> Export:
    """The history records of ``jobs`` submitted in [since, until), oldest first."""
    ex = Export([])
    for j in jobs:
        if (since is not None and j.submit_time < since) or (
            until is not None and j.submit_time >= until
        ):
            continue
        if not has_ended(j):
            ex.not_ended += 1
            continue
        if j.attempt == 0 or j.start_time is None or j.end_time is None:
            ex.never_started += 1
            continue
        events = client.job(j.id).events if j.attempt > 1 else None
        started = first_start(j, events)
        assert started is not None
        ex.records.append(history_record(j, started))
    ex.records.sort(key=lambda r: (r["submit_time"], _id_key(r["id"])))
    return ex


def _id_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head), job_id) if head.isdigit() else (0, job_id)


def write_history(path: Path, records: Sequence[dict[str, Any]]) -> None:
    """JSONL, or CSV when ``path`` ends in ``.csv`` (the loader's cell rules: lists
    ``|``-separated, topology ``level`` or ``level:required``)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        if path.suffix.lower() == ".csv":
            w = csv.writer(fh)
            w.writerow(COLUMNS)
            for r in records:
                w.writerow([_cell(c, r.get(c)) for c in COLUMNS])
        else:
            for r in records:
                fh.write(json.dumps(r, separators=(",", ":")) + "\n")
    tmp.replace(path)  # never a half-written history under the name asked for


def _cell(column: str, v: Any) -> str:
    if v is None:
        return ""
    if column in ("gpu_models", "queues"):
        return "|".join(v)
    if column == "topology":
        return str(v["level"]) + (":required" if v["required"] else "")
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@app.command("export")
def export(
    file: Annotated[Path, typer.Argument(help="Where to write: JSONL, or CSV if it ends .csv.")],
    since: Annotated[
        str | None,
        typer.Option("--since", "-S", help="Jobs submitted from: 7d, today, 2025-03-01, …"),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", "-E", help="… and before (default: now).")
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Write the jobs that ran and ended as a trace: gpufleet simulate replay --format jobs."""
    from gpufleet.cli.jobs.usage import parse_period

    t0, t1 = parse_period(since, until, time.time())
    with connect(server, token) as c:
        ex = collect(c, c.all_jobs(), t0, t1)
    try:
        write_history(file, ex.records)
    except OSError as e:
        out.fail(f"{file}: {e.strerror or e}", code=2)
    skipped = []
    if ex.never_started:
        skipped.append(f"{ex.never_started} that never started")
    if ex.not_ended:
        skipped.append(f"{ex.not_ended} not ended yet")
    out.note(
        f"wrote {len(ex.records)} job(s) to {file}"
        + (f"; left out {' and '.join(skipped)}" if skipped else "")
    )
