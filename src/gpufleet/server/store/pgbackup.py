"""PostgreSQL's side of ``backup.py``: ``pg_dump`` of the store's schema (custom or plain
format), restored with ``pg_restore`` or ``psql`` in one transaction.

The dump holds one schema, the one the store's URL uses (``public``, or the ``search_path`` in
its ``options``); a restore goes into that schema of the target database, which must exist and
be empty (the dump's own ``CREATE SCHEMA`` is left out, so that an empty ``public`` will do).
A password never goes on a command line: pg_dump gets it as ``PGPASSWORD``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

import sqlalchemy as sa
from sqlalchemy.engine import URL

from gpufleet.server.store.backup import (
    BackupError,
    BackupInfo,
    Kind,
    not_empty,
    private_file,
)
from gpufleet.server.store.engine import safe_url

_COPY = re.compile(r'^COPY "?([^".]+)"?\."?(alembic_version|jobs)"? \(.*\) FROM stdin;$')
_SCHEMA_DDL = ("CREATE SCHEMA ", "COMMENT ON SCHEMA ", "ALTER SCHEMA ")
_TOC_SCHEMA = re.compile(r"^\d+; \d+ \d+ (SCHEMA|COMMENT) - (SCHEMA )?")


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BackupError(
            f"{name} is not installed: install PostgreSQL's client programs (Debian: apt-get "
            "install postgresql-client), of the server's major version or newer"
        )
    return path


def libpq(u: URL) -> tuple[str, dict[str, str]]:
    """The URL for libpq's programs, without its password, and their environment with it."""
    env = dict(os.environ)
    if u.password is not None:
        env["PGPASSWORD"] = str(u.password)
    url = u.set(drivername="postgresql", password=None).render_as_string(hide_password=False)
    return url, env


def store_schema(u: URL) -> tuple[str | None, int]:
    """The schema the store's URL uses (None: its search_path names none that exists) and how
    many tables it holds."""
    engine = sa.create_engine(u, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as c:
            schema = c.execute(sa.text("SELECT current_schema()")).scalar()
            if schema is None:
                return None, 0
            n: int = c.execute(
                sa.text(
                    "SELECT count(*) FROM information_schema.tables "
                    "WHERE table_schema = current_schema()"
                )
            ).scalar_one()
            return str(schema), int(n)
    except sa.exc.OperationalError as e:
        raise BackupError(f"cannot reach the store at {safe_url(str(u))}: {e.orig}") from None
    finally:
        engine.dispose()


def _run(cmd: list[str], env: dict[str, str], what: str) -> str:
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        err = (res.stderr or "").strip().splitlines()
        raise BackupError(f"{what} failed: {err[-1] if err else f'exit {res.returncode}'}")
    return str(res.stdout)


def create(u: URL, dest: Path, fmt: Literal["custom", "plain"]) -> BackupInfo:
    schema, tables = store_schema(u)
    if schema is None or not tables:
        raise BackupError(
            f"no gpufleet store at {safe_url(str(u))}: give the controller's --db or --db-file"
        )
    pg_dump = tool("pg_dump")
    url, env = libpq(u)
    tmp = dest.with_name(f".{dest.name}.partial")
    tmp.unlink(missing_ok=True)
    private_file(tmp)
    try:
        _run(
            [
                pg_dump,
                f"--dbname={url}",
                f"--format={fmt}",
                f"--schema={schema}",
                "--no-owner",
                "--no-privileges",
                f"--file={tmp}",
            ],
            env,
            "pg_dump",
        )
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return inspect(dest, "pg-custom" if fmt == "custom" else "pg-plain")


def _lines(src: Path, kind: Kind) -> Iterator[str]:
    """The dump as SQL text: a plain file as it is; of a custom one, its alembic_version
    table only (all that ``inspect`` reads)."""
    if kind == "pg-plain":
        with src.open(encoding="utf-8", errors="replace") as f:
            yield from (line.rstrip("\n") for line in f)
        return
    text = _run(
        [tool("pg_restore"), "--data-only", "--table=alembic_version", "--file=-", str(src)],
        dict(os.environ),
        f"pg_restore reading {src}",
    )
    yield from text.splitlines()


def inspect(src: Path, kind: Kind) -> BackupInfo:
    """The backup's schema, revision and (plain format) jobs, read from its COPY blocks."""
    schema = revision = ""
    jobs = -1 if kind == "pg-custom" else 0
    table = ""
    for line in _lines(src, kind):
        if table:
            if line == "\\.":
                table = ""
            elif table == "jobs":
                jobs += 1
            elif not revision:
                revision = line.strip()
            continue
        m = _COPY.match(line)
        if m:
            schema, table = m.group(1), m.group(2)
    if not revision:
        raise BackupError(f"{src} holds no gpufleet store (no schema revision in the dump)")
    return BackupInfo(src, kind, revision, jobs, src.stat().st_size, schema)


def restore(u: URL, info: BackupInfo) -> None:
    schema, tables = store_schema(u)
    where = safe_url(str(u))
    if schema is None:
        raise BackupError(
            f"the store at {where} has no schema to restore into (its search_path names none "
            f"that exists): create schema {info.schema} there first"
        )
    if tables:
        raise not_empty(str(u), f"{tables} tables in schema {schema}")
    if schema != info.schema:
        raise BackupError(
            f"{info.file} holds schema {info.schema}, and the store at {where} uses schema "
            f"{schema}: restore it into a database whose store schema is {info.schema}"
        )
    url, env = libpq(u)
    if info.kind == "pg-custom":
        _pg_restore(info.file, url, env)
    else:
        _psql(info.file, url, env)


def _pg_restore(src: Path, url: str, env: dict[str, str]) -> None:
    pg_restore = tool("pg_restore")
    toc = _run([pg_restore, "--list", str(src)], env, f"pg_restore --list {src}")
    keep = [line for line in toc.splitlines() if not _TOC_SCHEMA.match(line)]
    with tempfile.NamedTemporaryFile("w", suffix=".list") as listing:
        listing.write("\n".join(keep) + "\n")
        listing.flush()
        _run(
            [
                pg_restore,
                f"--dbname={url}",
                "--no-owner",
                "--no-privileges",
                "--exit-on-error",
                "--single-transaction",
                f"--use-list={listing.name}",
                str(src),
            ],
            env,
            "pg_restore",
        )


def _psql(src: Path, url: str, env: dict[str, str]) -> None:
    """The plain dump through psql in one transaction, without its schema's own DDL."""
    cmd = [tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction"]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [*cmd, f"--dbname={url}", "-f", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            text=True,
        )
        assert proc.stdin is not None
        try:
            _feed(src, proc.stdin)
        except BrokenPipeError:
            pass  # psql stopped at an error: its message follows
        finally:
            proc.stdin.close()
        code = proc.wait()
        if code != 0:
            err.seek(0)
            lines = err.read().strip().splitlines()
            raise BackupError(f"psql failed: {lines[-1] if lines else f'exit {code}'}")


def _feed(src: Path, out: IO[str]) -> None:
    copying = False
    with src.open(encoding="utf-8") as f:
        for line in f:
            if copying:
                copying = line != "\\.\n"
            elif line.startswith("COPY ") and line.rstrip().endswith("FROM stdin;"):
                copying = True
            elif line.startswith(_SCHEMA_DDL):
                continue
            out.write(line)
