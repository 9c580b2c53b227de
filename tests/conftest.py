"""Shared fixtures. ``db_url`` runs a test on SQLite and on PostgreSQL, each time on an empty
database: a file in the test's tmp dir, or a schema made for the test and dropped after it.

PostgreSQL is ``GPUFLEET_TEST_PG`` (default: trust auth on 127.0.0.1:5432, database ``test``,
user ``postgres``); its tests are skipped, saying why, only when the server cannot be reached
within 30 s, and fail instead under ``CI=true`` (``realparts.py``, as for every real part a test
asks for with ``@pytest.mark.requires(...)``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import realparts
from realparts import PG_URL


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires(*parts): real parts the test needs (realparts.CHECKS); missing ones skip it, "
        "or fail it under CI=true",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture (a module's cluster or browser): skip, or under CI fail, the test."""
    for mark in item.iter_markers("requires"):
        realparts.require(*mark.args)


def _pg_connect() -> Any:
    """An autocommit psycopg connection for DDL; skips (fails under CI) when PG is unreachable."""
    import psycopg

    realparts.require_postgres()
    return psycopg.connect(**realparts.pg_conninfo(PG_URL), autocommit=True)


@contextmanager
def pg_schema() -> Iterator[str]:
    """A PostgreSQL URL whose tables live in a schema made for the caller, dropped after."""
    schema = f"gf_test_{uuid.uuid4().hex[:12]}"
    with _pg_connect() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with _pg_connect() as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def sqlite_db_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'gpufleet.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_db_url(tmp_path)
        return
    with pg_schema() as url:
        yield url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """PostgreSQL only: an empty schema of its own."""
    with pg_schema() as url:
        yield url


@pytest.fixture
def store(db_url: str) -> Iterator[Any]:
    from gpufleet.server.store import Store

    s = Store.open(db_url)
    try:
        yield s
    finally:
        s.close()
