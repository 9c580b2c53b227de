"""Engines for the two dialects, and migrations run on open.

SQLite: WAL (readers never block the writer), foreign keys on, and ``synchronous=FULL`` by
default. NORMAL survives a killed process (SIGKILL) but may lose the last commits on a power
cut; FULL fsyncs the WAL at every commit. The controller sends a Launch only after its STARTING
transition committed, so losing that commit after the agent acted would let the restarted
controller launch the same attempt twice. One fsync per commit is affordable because the server
group-commits (BENCHMARKS.md, "Store (issue 6)"). ``?synchronous=normal`` in the URL opts out.

Write transactions on SQLite start with ``BEGIN IMMEDIATE``: a deferred transaction that reads
first and writes later fails with SQLITE_BUSY instead of waiting when another process wrote in
between; IMMEDIATE takes the write lock up front and waits (busy timeout) like PostgreSQL does.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import URL, make_url

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
BUSY_TIMEOUT_S = 30.0
WRITE = {"gpufleet_write": True}  # execution option: this transaction will write
_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_PG_MIGRATION_LOCK = 0x67706675  # pg_advisory_xact_lock key: one migrator at a time


def sqlite_url(data_dir: str | Path) -> str:
    """The default store: one file in the data directory."""
    return f"sqlite:///{Path(data_dir).resolve() / 'gpufleet.db'}"


def normalize_url(url: str) -> URL:
    """``postgresql://`` and ``postgres://`` mean psycopg 3, the driver gpufleet ships with."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    if u.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database {u.drivername!r}: use sqlite:/// or postgresql://")
    return u


def resolve_db_url(db: str, db_file: str | Path | None, env: Mapping[str, str]) -> str:
    """The database URL from ``--db`` (no password: argv is public), else the first line of
    ``--db-file`` (mode 0600), else ``$GPUFLEET_DB``; empty means SQLite in the data dir."""
    from gpufleet.base.secretfile import read_secret

    if db and db_file:
        raise ValueError("--db and --db-file: give one of them")
    if db:
        if make_url(db).password is not None:
            raise ValueError(
                "--db: the URL holds a password, and the command line is readable by every "
                "user: put the URL in a file (mode 0600) given as --db-file FILE, or in "
                "the GPUFLEET_DB environment variable"
            )
        return db
    if db_file:
        return read_secret(db_file, "database URL")
    return env.get("GPUFLEET_DB", "").strip()


def safe_url(url: str) -> str:
    """The URL with its password masked: what logs and error messages may show."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparsable database URL>"


def make_engine(url: str) -> sa.Engine:
    u = normalize_url(url)
    if u.get_backend_name() == "sqlite":
        return _sqlite_engine(u)
    return sa.create_engine(u, pool_pre_ping=True, pool_size=8, max_overflow=8)


def _sqlite_engine(u: URL) -> sa.Engine:
    sync = str(u.query.get("synchronous", "full")).upper()
    if sync not in _SYNC_MODES:
        raise ValueError(f"synchronous={sync.lower()}: use one of {', '.join(_SYNC_MODES)}")
    u = u.difference_update_query(["synchronous"])
    if u.database is None or u.database in ("", ":memory:"):
        raise ValueError("the SQLite store needs a file (WAL does not apply to :memory:)")
    Path(u.database).parent.mkdir(parents=True, exist_ok=True)
    _private_sqlite_files(Path(u.database))
    engine = sa.create_engine(u, connect_args={"timeout": BUSY_TIMEOUT_S})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see _on_begin)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={sync}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("gpufleet_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _private_sqlite_files(db: Path) -> None:
    """Create the database file 0600 before SQLite opens it, whatever the umask: SQLite gives its
    -wal and -shm files the database file's mode. Files left more open are tightened."""
    os.close(os.open(db, os.O_RDONLY | os.O_CREAT, 0o600))
    for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        try:
            mode = stat.S_IMODE(p.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            p.chmod(mode & 0o700)


def upgrade(engine: sa.Engine) -> None:
    """``alembic upgrade head`` on this engine; safe when several processes open at once."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.connect().execution_options(**WRITE) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
