"""Shared fixtures. ``db_url`` is an empty database for the test: a file in the test's tmp dir
(SQLite), or a schema made for the test and dropped after it (PostgreSQL). A test runs on
both only where the store is what it tests: a module marked ``both_stores`` (the store's
contract: tests/integration/test_store*.py and the chaos store tests) or a test marked so (a
handful of API tests that go through every layer down to the database); every other test that
asks for a ``db_url`` runs on SQLite alone, since the API above the store is the same on both.

PostgreSQL is ``GPUFLEET_TEST_PG`` (default: trust auth on 127.0.0.1:5432, database ``test``,
user ``postgres``); its tests are skipped, saying why, only when the server cannot be reached
within 30 s, and fail instead under ``CI=true`` (``realparts.py``, as for every real part a test
asks for with ``@pytest.mark.requires(...)``).
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import realparts
from gpufleet.ops import prefork
from realparts import PG_URL
from support import grouping, installs, noprocs, ports
from support.slurm_local import SlurmPool

# Hypothesis's default deadline (200 ms an example) is a wall-time assertion: on 8 workers sharing
# 2 cores an example that takes 20 ms alone can take longer, and the test failed for the load,
# not for what it checks (the store's codec round trip, once in a helper's combined run)
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-processes",
        action="store_true",
        help="skip each test at the moment it starts a process (make test-fast)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the main process, before xdist starts workers
        installs.name_run()
    if config.getoption("no_processes"):
        noprocs.install(config)
    ports.use_live_range()
    # test clusters' controllers and agents are forked from one process per worker that has
    # imported them (ops/prefork.py: ~1 s of CPU saved a controller, ~0.3 s an agent);
    # GPUFLEET_TEST_EXEC=1 starts every one by exec, as `make demo` and real nodes do
    if not os.environ.get("GPUFLEET_TEST_EXEC") and not config.getoption("no_processes"):
        prefork.enable()
    config.addinivalue_line(
        "markers",
        "requires(*parts): real parts the test needs (realparts.CHECKS); missing ones skip it, "
        "or fail it under CI=true",
    )
    config.addinivalue_line(
        "markers",
        "both_stores: the test's db_url is SQLite and then PostgreSQL (else SQLite alone)",
    )
    config.addinivalue_line(
        "markers",
        "slow: takes tens of seconds; started first, so that it does not end a parallel run alone",
    )
    config.addinivalue_line(
        "markers",
        "alone: measures latency under a load of its own; make test runs it after the parallel "
        "pass, by itself",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # every worker has ended
        installs.forget()


STORES = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``db_url``: both stores for ``both_stores`` tests, SQLite for the rest."""
    if "db_url" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("both_stores") is not None
        metafunc.parametrize("db_url", STORES if both else STORES[:1], indirect=True)


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


@pytest.fixture
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


@pytest.fixture(scope="session")
def slurm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmPool]:
    """This worker's real Slurms (tests/support/slurm_local.py); none here: skipped, under CI
    failed. Taken through ``shared_slurm`` or ``slurms`` (``grouping.ONE_GROUP``)."""
    realparts.require("slurm")
    pool = SlurmPool(tmp_path_factory)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="module")
def shared_slurm(slurm_pool: SlurmPool) -> dict[str, str]:
    """The environment of the four-node Slurm its modules share, no job of an earlier
    module's left in it."""
    return slurm_pool.shared()


@pytest.fixture(scope="session")
def slurms(slurm_pool: SlurmPool) -> SlurmPool:
    """The pool, for a Slurm of a test's own (``slurms.own(nodes=…, extra_conf=…)``)."""
    return slurm_pool


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    grouping.end_unused_session_fixtures(item, nextitem)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (the test modules, what they import, the items) lives all session:
    frozen, the cyclic GC never walks it again. Measured: a worker's CPU 21.0-21.7 → 18.5-19.9
    s on test_api, test_scheduler_properties and test_cli_jobs (ADR 0069)."""
    gc.freeze()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its hook names the items)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    grouping.assign_groups(items)
    grouping.longest_first(items)
