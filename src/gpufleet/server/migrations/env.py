"""Alembic environment: runs on the connection the store hands over (``Store.open``), or on
``sqlalchemy.url`` when invoked from the alembic command line."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from gpufleet.server.store.engine import make_engine
from gpufleet.server.store.schema import metadata

config = context.config


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is not None:
        _migrate(conn)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as c:
        _migrate(c)
        c.commit()


def _migrate(conn: sa.Connection) -> None:
    # render_as_batch: SQLite alters tables by copying them; later migrations need it
    context.configure(connection=conn, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run()
