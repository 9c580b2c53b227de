"""``gpufleet show JOB``: one job's state, placement, Reason, estimated start and events."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from gpufleet.api import schemas as s
from gpufleet.api.jobmetrics import JobMetricsOut
from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.cli.jobs.common import JsonOpt
from gpufleet.io import jobs_table

_gpus, _run_time = jobs_table.gpus, jobs_table.run_time


def _ended(j: s.JobOut) -> str | None:
    """How the job ended in Slurm's words (scontrol show job's Reason=)."""
    return None if j.ended is None else j.ended.reason


def show(
    job: Annotated[str, typer.Argument(help="Job id.")],
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """One job: state, placement, Reason, estimated start and its events."""
    with connect(server, token, {404: "check the job id (gpufleet jobs --all)"}) as c:
        j = c.job(job)
    if json_out:
        out.emit_json(j)
        return
    now = time.time()
    spec = j.spec
    retries = f"{j.retries_used} of {spec.get('max_retries', 0)}"
    command = spec.get("command")
    queues = spec.get("queues") or []
    out.fields(
        [
            ("Job", j.id),
            ("Name", j.name),
            ("User", j.user),
            ("Queue", j.queue),
            # Slurm's partition string: the one it runs (or last ran) in first
            (
                "Queues",
                ",".join([j.queue, *(q for q in queues if q != j.queue)]) if queues else None,
            ),
            ("State", j.state),
            ("Attempt", f"{j.attempt} (retries used {retries})"),
            ("GPUs", _gpus(j)),
            ("Submitted", out.when_relative(j.submit_time, now)),
            ("Started", out.when_relative(j.start_time, now) if j.start_time else None),
            ("Ended", out.when_relative(j.end_time, now) if j.end_time else None),
            ("Run time", _run_time(j, now) if j.start_time else None),
            (
                "Time limit",
                out.duration(spec.get("time_limit_s")) if spec.get("time_limit_s") else None,
            ),
            ("Command", " ".join(command) if isinstance(command, list) else command),
            ("Reason", f"{j.reason.code}: {j.reason.message}" if j.reason else _ended(j)),
            ("ExitCode", j.ended.exit_code if j.ended else None),  # Slurm's CODE:SIGNAL
            ("Est. start", _estimated_start(j.reason, now) if j.reason else None),
        ]
    )
    if j.placement:
        out.table(
            ["RANK", "NODE", "GPUS", "CPUS", "MEMORY"],
            [
                [
                    i,
                    p.node,
                    _gpu_list(p),
                    out.number(p.cpu_milli / 1000),
                    f"{p.memory_mib / 1024:g} GiB",
                ]
                for i, p in enumerate(j.placement)
            ],
            title="Placement",
            right=["RANK", "CPUS", "MEMORY"],
        )
    if j.metrics is not None:
        _metrics(j.metrics, now)
    if j.events:
        out.table(
            ["TIME", "ATTEMPT", "STATE", "WHY"],
            [[out.when(e.time, now), e.attempt, e.state, e.why] for e in j.events],
            title="Events",
            right=["ATTEMPT"],
        )


def _metrics(m: JobMetricsOut, now: float) -> None:
    """What the job reported of itself ($GPUFLEET_METRICS_FILE), and what in it was refused."""
    out.table(
        ["NAME", "VALUE"],
        [[k, f"{v:g}"] for k, v in m.values.items()],
        title=f"Metrics (reported {out.when_relative(m.at, now)})",
        right=["VALUE"],
        empty="none",
    )
    for p in m.problems:
        print(f"metrics file refused: {p}")


def _gpu_list(p: s.PlacementOut) -> str:
    gpus = ",".join(map(str, p.gpus)) or "-"
    return f"{gpus} ({out.number(p.gpu_milli / 1000)} of it)" if p.gpu_milli < 1000 else gpus


BOUND_WORDS = {
    "reserved": "at the latest: reserved, unless nodes fail or a job of higher priority comes",
    "planned": "the queue played forward, if no job of higher priority comes",
}


def _estimated_start(r: s.ReasonOut, now: float) -> str | None:
    """When a pending job should start, in local time, and how sure that is: ``starts in 2h
    10m, 80 % between 1h 40m and 3h 00m`` where the cluster's history gives a band."""
    if r.estimated_start is None:
        return None
    words = BOUND_WORDS.get(r.start_bound)
    at = out.when_relative(r.estimated_start, now)
    if r.start_low is not None and r.start_high is not None:
        low, high = (max(0.0, t - now) for t in (r.start_low, r.start_high))
        at += f", 80 % between {out.duration(low)} and {out.duration(high)} from now"
    return f"{at}, {words}" if words else at
