"""Backups of the store while the controller runs, and their restore into an empty store
(issue 26; docs/adr/0033-backups-go-straight-to-the-store.md).

SQLite: the online backup API (``sqlite3.Connection.backup``) copies the database in one step,
under one read transaction: a consistent snapshot, while the controller keeps writing (WAL: a
reader never blocks the writer). PostgreSQL: ``pg_dump`` of the store's schema, custom or plain
format (``pgbackup.py``). Either way the backup holds the schema's Alembic revision; a restore
refuses a backup of another revision and a store that already holds anything.

Job secrets stay sealed in a backup: the key that opens them is not in the store, so a backup
alone reveals no secret, and the restored controller needs the same key.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL

from gpufleet.server.store.engine import BUSY_TIMEOUT_S, MIGRATIONS, normalize_url, safe_url
from gpufleet.server.store.schema import counters, leader, services

Kind = Literal["sqlite", "pg-custom", "pg-plain"]
SQLITE_MAGIC = b"SQLite format 3\x00"
PG_CUSTOM_MAGIC = b"PGDMP"
PG_PLAIN_MARK = b"-- PostgreSQL database dump"
SKIP_JOB_IDS = 100_000  # a restore's new job ids start this far past the backup's last
SKIP_EPOCHS = 1_000  # and its leader epochs, past takeovers after the backup
SKIP_REPLICAS = 1_000  # and each service's replica numbers


class BackupError(Exception):
    """A backup or restore refused or failed: the sentence says why and what to do."""


@dataclass(frozen=True)
class BackupInfo:
    """What a backup holds: its file, kind, schema revision, how many jobs (-1: not counted,
    a custom-format dump), its size, and (PostgreSQL) the schema it was dumped from."""

    file: Path
    kind: Kind
    revision: str
    jobs: int
    size: int
    schema: str = ""


def head_revision() -> str:
    """The Alembic revision this gpufleet's store has (what a controller migrates to)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    assert head is not None
    return head


def create(url: str, dest: Path, fmt: Literal["custom", "plain"] = "custom") -> BackupInfo:
    """Back the store at ``url`` up into the new file ``dest`` (0600; never overwritten)."""
    u = normalize_url(url)
    if dest.exists():
        raise BackupError(f"{dest}: exists; a backup never overwrites a file, choose a new name")
    if not dest.parent.is_dir():
        raise BackupError(f"{dest.parent}: no such directory")
    if u.get_backend_name() == "sqlite":
        return _sqlite_create(_sqlite_path(u), dest)
    from gpufleet.server.store import pgbackup

    return pgbackup.create(u, dest, fmt)


def inspect(src: Path) -> BackupInfo:
    """What the backup file ``src`` holds; BackupError when it is no gpufleet backup."""
    kind = sniff(src)
    if kind == "sqlite":
        rev, jobs = _sqlite_contents(src)
        return BackupInfo(src, kind, rev, jobs, src.stat().st_size)
    from gpufleet.server.store import pgbackup

    return pgbackup.inspect(src, kind)


def restore(url: str, src: Path, skip_job_ids: int = SKIP_JOB_IDS) -> BackupInfo:
    """Restore ``src`` into the empty store at ``url``: the revisions must match. New job ids
    continue ``skip_job_ids`` past the backup's last: the lost store may have handed out the
    next ones after the backup was taken, and an id is never given to two jobs (an agent that
    ran the old one would take the new one's launch for a redelivery)."""
    u = normalize_url(url)
    kind = sniff(src)
    backend = u.get_backend_name()
    if (kind == "sqlite") != (backend == "sqlite"):
        made = "SQLite" if kind == "sqlite" else "PostgreSQL"
        raise BackupError(
            f"{src} is a {made} backup and the store at {safe_url(url)} is "
            f"{'SQLite' if backend == 'sqlite' else 'PostgreSQL'}: restore it into a {made} store"
        )
    info = inspect(src)
    check_revision(info)
    if backend == "sqlite":
        _sqlite_restore(src, _sqlite_path(u), url)
    else:
        from gpufleet.server.store import pgbackup

        pgbackup.restore(u, info)
    after_restore(u, skip_job_ids)
    return info


def after_restore(u: URL, skip_job_ids: int) -> None:
    """What the lost store may have used up after the backup, skipped: job ids, services'
    replica numbers (a replica is the job ``NAME.N``), and (high availability, ADR 0032)
    leader epochs, which agents refuse to see fall. Nobody leads a restored store: the first
    controller takes the lease at once."""
    engine = sa.create_engine(u, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as c:
            c.execute(
                sa.update(counters)
                .where(counters.c.name == "job")
                .values(value=counters.c.value + skip_job_ids)
            )
            c.execute(
                sa.update(leader).values(epoch=leader.c.epoch + SKIP_EPOCHS, holder="", address="")
            )
            for name, record in c.execute(sa.select(services.c.name, services.c.record)).all():
                rec: dict[str, Any] = dict(cast("dict[str, Any]", record))
                rec["next_index"] = int(rec.get("next_index", 1)) + SKIP_REPLICAS
                c.execute(sa.update(services).where(services.c.name == name).values(record=rec))
    finally:
        engine.dispose()


def next_job_id(url: str) -> int:
    """The number the store gives its next job."""
    engine = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as c:
            v = c.execute(sa.select(counters.c.value).where(counters.c.name == "job")).scalar()
    finally:
        engine.dispose()
    return int(v or 0) + 1


def check_revision(info: BackupInfo) -> None:
    head = head_revision()
    if info.revision != head:
        raise BackupError(
            f"{info.file} holds a store of schema revision {info.revision}, and this gpufleet's "
            f"store is revision {head}: restore it with the gpufleet release that made it (a "
            "newer controller then upgrades the restored store when it starts)"
        )


def not_empty(url: str, what: str) -> BackupError:
    return BackupError(
        f"the store at {safe_url(url)} is not empty ({what}): a backup restores only into an "
        "empty store; give a new database (--db), or move the data directory's gpufleet.db away"
    )


def sniff(src: Path) -> Kind:
    try:
        with src.open("rb") as f:
            head = f.read(256)
    except FileNotFoundError:
        raise BackupError(f"{src}: no such file") from None
    except OSError as e:
        raise BackupError(f"{src}: cannot read it ({e.strerror or e})") from None
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head.startswith(PG_CUSTOM_MAGIC):
        return "pg-custom"
    if PG_PLAIN_MARK in head:
        return "pg-plain"
    raise BackupError(
        f"{src} is not a gpufleet backup (neither SQLite nor a pg_dump file): "
        "make one with gpufleet backup create FILE"
    )


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 (it must not exist): a backup holds token hashes
    and sealed secrets, readable by nobody but its owner from the first byte."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


# ----- SQLite -------------------------------------------------------------------------------


def _sqlite_path(u: URL) -> Path:
    if not u.database or u.database == ":memory:":
        raise BackupError("the SQLite store needs a file")
    return Path(u.database)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    return conn


def _sqlite_contents(path: Path) -> tuple[str, int]:
    """(revision, jobs) of a SQLite store or backup; BackupError when it is none."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        rev = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()
    except sqlite3.DatabaseError as e:
        raise BackupError(f"{path} holds no gpufleet store ({e})") from None
    finally:
        conn.close()
    if rev is None:
        raise BackupError(f"{path} holds no gpufleet store (no schema revision)")
    return str(rev[0]), int(jobs[0])


def _sqlite_create(db: Path, dest: Path) -> BackupInfo:
    if not db.is_file():
        raise BackupError(f"no store at {db}: give the controller's --data-dir or --db")
    tmp = dest.with_name(f".{dest.name}.partial")
    tmp.unlink(missing_ok=True)
    private_file(tmp)
    try:
        src, out = _connect(db), sqlite3.connect(tmp, isolation_level=None)
        try:
            src.backup(out)  # one step: one read transaction, one consistent snapshot
            out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal
        finally:
            src.close()
            out.close()
        rev, jobs = _sqlite_contents(tmp)
        _fsync(tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return BackupInfo(dest, "sqlite", rev, jobs, dest.stat().st_size)


def _sqlite_restore(src: Path, db: Path, url: str) -> None:
    if db.exists() and db.stat().st_size > 0:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table'")
            n = int(tables.fetchone()[0])
        finally:
            conn.close()
        if n:
            raise not_empty(url, f"{n} tables in {db}")
    db.parent.mkdir(parents=True, exist_ok=True)
    tmp = db.with_name(f".{db.name}.restoring")
    tmp.unlink(missing_ok=True)
    private_file(tmp)
    try:
        back = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        out = sqlite3.connect(tmp, isolation_level=None)
        try:
            back.backup(out)
            out.execute("PRAGMA journal_mode=WAL")  # as the controller keeps it
        finally:
            back.close()
            out.close()
        _fsync(tmp)
        for side in ("-wal", "-shm"):  # an empty store's leftovers: not of the restored one
            db.with_name(db.name + side).unlink(missing_ok=True)
        os.replace(tmp, db)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
