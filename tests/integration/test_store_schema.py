"""Migrations: from an empty database to head, idempotent, concurrent, matching schema.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from gpufleet.model.job import JobSpec
from gpufleet.server.store import NewJob, Store, sqlite_url
from gpufleet.server.store.codec import spec_to_dict
from gpufleet.server.store.engine import MIGRATIONS, WRITE, make_engine, normalize_url
from gpufleet.server.store.schema import metadata

pytestmark = pytest.mark.both_stores  # the store's contract: SQLite and PostgreSQL

PRAGMAS = ("journal_mode", "foreign_keys", "synchronous", "busy_timeout")
TABLES = {"counters", "jobs", "job_events", "nodes", "node_events", "queues", "tokens", "audit"}


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def _head() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def _revision(engine: sa.Engine) -> str | None:
    with engine.connect() as c:
        return MigrationContext.configure(c).get_current_revision()


def test_open_migrates_an_empty_database_and_is_idempotent(db_url: str) -> None:
    engine = make_engine(db_url)
    assert _revision(engine) is None
    with Store.open(db_url) as s:
        jid = s.add_jobs([NewJob(JobSpec("a", "u"), 1.0)])[0]
    assert set(sa.inspect(engine).get_table_names()) >= TABLES
    assert _revision(engine) == _head()
    with Store.open(db_url) as s:  # a second open changes nothing and loses nothing
        assert [j.id for j in s.list_jobs()] == [jid]
    assert _revision(engine) == _head()
    engine.dispose()


def test_migrations_match_the_schema_module(db_url: str) -> None:
    Store.open(db_url).close()
    engine = make_engine(db_url)
    with engine.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), metadata)
    engine.dispose()
    assert diff == []


def test_upgrade_keeps_rows_written_by_an_older_revision(db_url: str) -> None:
    engine = make_engine(db_url)
    cfg = _config()
    with engine.connect().execution_options(**WRITE) as c, c.begin():
        cfg.attributes["connection"] = c
        command.upgrade(cfg, "0001")
        row = {
            "id": "7",
            "seq": 7,
            "user": "u",
            "queue": "default",
            "state": "RUNNING",
            "attempt": 1,
            "retries_used": 0,
            "max_retries": 0,
            "total_gpu_milli": 1000,
            "submit_time": 1.0,
            "eligible_time": 0.0,
            "attained_gpu_s": 0.0,
            "spec": spec_to_dict(JobSpec("old", "u")),
            "allocation": [],
            "depends_on": [],
        }
        jobs_0001 = sa.Table("jobs", sa.MetaData(), autoload_with=c)  # as 0001 made it
        c.execute(sa.insert(jobs_0001).values(row))
        c.execute(sa.text("UPDATE counters SET value = 7"))
    engine.dispose()
    with Store.open(db_url) as s:
        old = s.job("7")
        assert old is not None and old.spec.name == "old" and old.borrowing is False
        assert s.add_jobs([NewJob(JobSpec("new", "u"), 2.0)]) == ["8"]


def test_a_store_from_before_metrics_tokens_takes_them_and_refuses_other_roles(
    db_url: str,
) -> None:
    """0008: the tokens' role check lets ``metrics`` in (a store made by 0007 with tokens in
    it keeps them), and the database itself still refuses a role nobody knows."""
    engine = make_engine(db_url)
    cfg = _config()
    with engine.connect().execution_options(**WRITE) as c, c.begin():
        cfg.attributes["connection"] = c
        command.upgrade(cfg, "0007")
    engine.dispose()
    with Store.open(db_url) as s:
        s.create_token("root", "admin", now=1.0)
        info, secret = s.create_token("prometheus", "metrics", now=2.0)
        assert info.role == "metrics" and info.user is None and info.node is None
        assert s.verify_token(secret) == info
        assert [t.name for t in s.tokens()] == ["root", "prometheus"]
    engine = make_engine(db_url)
    row = {"n": "x", "h": "0" * 64}
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as c:
        c.execute(
            sa.text(
                "INSERT INTO tokens (name, role, secret_sha256, created_time) "
                "VALUES (:n, 'root', :h, 1)"
            ),
            row,
        )
    engine.dispose()


def test_concurrent_opens_of_an_empty_database(db_url: str) -> None:
    code = "import sys; from gpufleet.server.store import Store; Store.open(sys.argv[1]).close()"
    procs = [subprocess.Popen([sys.executable, "-c", code, db_url]) for _ in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    engine = make_engine(db_url)
    assert _revision(engine) == _head()
    engine.dispose()


def test_sqlite_runs_in_wal_with_foreign_keys_and_the_chosen_sync(tmp_path: Path) -> None:
    for query, level in (("", 2), ("?synchronous=normal", 1)):  # 2 = FULL, 1 = NORMAL
        engine = make_engine(f"{sqlite_url(tmp_path)}{query}")
        with engine.connect() as c:
            pragmas = [c.exec_driver_sql(f"PRAGMA {p}").scalar() for p in PRAGMAS]
        assert pragmas == ["wal", 1, level, 30000]
        engine.dispose()


def test_urls() -> None:
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert sqlite_url("/data").endswith("/data/gpufleet.db")
    with pytest.raises(ValueError, match="unsupported database"):
        make_engine("mysql://u@h/db")
    with pytest.raises(ValueError, match="needs a file"):
        make_engine("sqlite://")
    with pytest.raises(ValueError, match="synchronous=sometimes"):
        make_engine("sqlite:////tmp/x.db?synchronous=sometimes")
