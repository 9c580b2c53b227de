"""``gpufleet accounting``: GPU-hours per user or queue over a period, like sreport; and the
period as ``--since``/``--until`` (sacct's -S/-E) read it, shared with ``gpufleet history``."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.cli.jobs.common import JsonOpt


def parse_period(
    since: str | None, until: str | None, now: float
) -> tuple[float | None, float | None]:
    """``--since``/``--until`` as times (None: not given); a CLI error when unreadable or
    backwards."""
    try:
        t0 = parse_when(since, now) if since else None
        t1 = parse_when(until, now) if until else None
    except typer.BadParameter as e:
        out.fail(f"--since/--until {e.message}", code=2)
    if t0 is not None and t1 is not None and t1 <= t0:
        out.fail("--until must be after --since", code=2)
    return t0, t1


def parse_when(text: str, now: float) -> float:
    """A point in time as sacct's -S/-E take it (``cli/when.py``); BadParameter when unread."""
    from gpufleet.cli import when

    try:
        return when.parse_when(text, now)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


def accounting(
    since: Annotated[
        str | None,
        typer.Option("--since", "-S", help="7d, today, 2025-03-01, … (default: server's)"),
    ] = None,
    until: Annotated[str | None, typer.Option("--until", "-E", help="Default: now.")] = None,
    by: Annotated[str, typer.Option("--by", help="user or queue.")] = "user",
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU-hours allocated and used (by GPU utilization) per user or queue, like sreport."""
    if by not in ("user", "queue"):
        out.fail(f"--by {by}: expected user or queue", code=2)
    now = time.time()
    t0, t1 = parse_period(since, until, now)
    with connect(server, token) as c:
        rows = c.accounting(since=t0, until=t1, by=by)
        fair = c.fairness(since=t0, until=t1) if by == "queue" else None
    if json_out:
        out.emit_json(rows)
        return
    rows = sorted(rows, key=lambda r: -r.gpu_hours)
    period = f"{out.when(t0, now) if t0 else 'the start'} to {out.when(t1, now) if t1 else 'now'}"
    alloc, used = sum(r.gpu_hours for r in rows), sum(r.used_gpu_hours for r in rows)
    total = [["TOTAL", sum(r.jobs for r in rows), *_hours(alloc, used)]]
    out.table(
        [by.upper(), "JOBS", "GPU-HOURS", "USED", "USED%"],
        [[r.key, r.jobs, *_hours(r.gpu_hours, r.used_gpu_hours)] for r in rows]
        + (total if len(rows) > 1 else []),
        title=f"GPU-hours allocated and used (by GPU utilization) by {by}, {period}",
        right=["JOBS", "GPU-HOURS", "USED", "USED%"],
        empty="no usage in this period",
    )
    if fair is not None and fair.jain is not None:
        # how close each queue came to its fair share of what was wanted (hourly)
        shares = ", ".join(f"{q} {100 * r:.0f} %" for q, r in sorted(fair.queues.items()))
        out.note(
            f"fairness against entitlement: {fair.jain:.3f} (Jain, over {fair.windows} "
            f"hours with two or more queues waiting or running); of entitlement: {shares}"
        )


def _hours(allocated: float, used: float) -> list[str]:
    """Allocated and used GPU-hours, and used as a share of allocated ("-" with none)."""
    pct = f"{100.0 * used / allocated:.0f}%" if allocated > 0 else "-"
    return [f"{allocated:,.1f}", f"{used:,.1f}", pct]
