"""The GPU-time used (utilization-weighted) per user, queue and hour: added to at each of the
controller's sample intervals, summed per user or queue for `gpufleet accounting`. An hour
counts whole in a period it overlaps: "used" has an hour's resolution, "allocated" (from the
transitions, accounting.py) the second's."""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from gpufleet.server.store.schema import gpu_use

HOUR_S = 3600.0
UseKey = tuple[str, str, float]  # (user, queue, hour's start)

_ADD = (
    sa.update(gpu_use)
    .where(
        gpu_use.c.user == sa.bindparam("b_user"),
        gpu_use.c.queue == sa.bindparam("b_queue"),
        gpu_use.c.hour == sa.bindparam("b_hour"),
    )
    .values(used_gpu_s=gpu_use.c.used_gpu_s + sa.bindparam("b_add"))
)


def hour_of(t: float) -> float:
    return float(int(t // HOUR_S) * HOUR_S)


def add(conn: sa.Connection, used: Mapping[UseKey, float]) -> None:
    """Add GPU-seconds to each (user, queue, hour): a row each, made on first use."""
    for (user, queue, hour), v in used.items():
        n = conn.execute(_ADD, {"b_user": user, "b_queue": queue, "b_hour": hour, "b_add": v})
        if n.rowcount == 0:
            conn.execute(
                sa.insert(gpu_use), {"user": user, "queue": queue, "hour": hour, "used_gpu_s": v}
            )


def used_hours(
    conn: sa.Connection, since: float, until: float, group_by: str = "user"
) -> dict[str, float]:
    """GPU-hours used per user (or queue) in the hours that overlap ``[since, until)``."""
    key = gpu_use.c.user if group_by == "user" else gpu_use.c.queue
    q = (
        sa.select(key.label("key"), sa.func.sum(gpu_use.c.used_gpu_s).label("s"))
        .where(gpu_use.c.hour >= hour_of(since), gpu_use.c.hour < until)
        .group_by(key)
    )
    return {str(r.key): float(r.s or 0.0) / HOUR_S for r in conn.execute(q)}
