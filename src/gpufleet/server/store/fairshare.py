"""The fair-share ledger's rows: saved whole, read whole."""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from gpufleet.server.store.schema import NAME_MAX, fairshare_usage


def save(conn: sa.Connection, values: Mapping[str, float], as_of: float) -> None:
    """Replace the ledger (a handful of rows: one per queue)."""
    conn.execute(sa.delete(fairshare_usage))
    if values:
        conn.execute(
            sa.insert(fairshare_usage),
            [{"queue": q, "usage": float(u), "as_of": as_of} for q, u in values.items()],
        )


PROBE_ROWS = 64  # with names of NAME_MAX characters: some pages, as a turn's commit writes


def probe(conn: sa.Connection) -> None:
    """Rows written and deleted in one transaction: the database had room for them."""
    names = [f"\x01probe-{i}".ljust(NAME_MAX, "x") for i in range(PROBE_ROWS)]
    conn.execute(
        sa.insert(fairshare_usage), [{"queue": q, "usage": 0.0, "as_of": 0.0} for q in names]
    )
    conn.execute(sa.delete(fairshare_usage).where(fairshare_usage.c.queue.in_(names)))


def load(conn: sa.Connection) -> tuple[dict[str, float], float | None]:
    """The ledger and the time it was saved at (None: never saved)."""
    rows = conn.execute(sa.select(fairshare_usage)).all()
    if not rows:
        return {}, None
    return {r.queue: float(r.usage) for r in rows}, max(float(r.as_of) for r in rows)
