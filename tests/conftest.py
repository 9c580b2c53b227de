"""Shared fixtures. ``db_url`` runs a test on SQLite and on PostgreSQL, each time on an empty
database: a file in the test's tmp dir, or a schema made for the test and dropped after it.

PostgreSQL is ``GPUFLEET_TEST_PG`` (default: trust auth on 127.0.0.1:5432, database ``test``,
user ``postgres``); its tests are skipped, saying why, only when the server cannot be reached.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PG_URL = os.environ.get("GPUFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_pg_state: dict[str, Any] = {}


def _pg_conninfo() -> dict[str, Any]:
    from sqlalchemy.engine import make_url

    u = make_url(PG_URL)
    info = {"host": u.host, "port": u.port or 5432, "user": u.username, "dbname": u.database}
    if u.password:
        info["password"] = u.password
    return info


def _pg_connect() -> Any:
    """An autocommit psycopg connection for DDL, or skip the test when PG is unreachable."""
    import psycopg

    if "error" not in _pg_state:
        try:
            psycopg.connect(**_pg_conninfo(), connect_timeout=3).close()
            _pg_state["error"] = None
        except psycopg.OperationalError as e:
            _pg_state["error"] = str(e).strip().splitlines()[0]
    if _pg_state["error"] is not None:
        pytest.skip(
            f"PostgreSQL unreachable at {PG_URL} ({_pg_state['error']}); set GPUFLEET_TEST_PG"
        )
    return psycopg.connect(**_pg_conninfo(), autocommit=True)


def sqlite_db_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'gpufleet.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_db_url(tmp_path)
        return
    schema = f"gf_test_{uuid.uuid4().hex[:12]}"
    with _pg_connect() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with _pg_connect() as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def store(db_url: str) -> Iterator[Any]:
    from gpufleet.server.store import Store

    s = Store.open(db_url)
    try:
        yield s
    finally:
        s.close()
