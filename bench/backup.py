"""Backup and restore time for a store of N jobs (issue 26): ``gpufleet backup create`` and
``restore``'s work (``server/store/backup.py``), timed on SQLite (the online backup API) and
on PostgreSQL (pg_dump's custom and plain formats, pg_restore / psql), each into a fresh
empty store. The store is filled as the controller fills it: each job added with an
idempotency key (batches of 1,000) and moved PENDING → STARTING with a 2-node allocation, so
each job has its row, two events and an audit-free history.

    PYTHONPATH=. .venv/bin/python bench/backup.py [--jobs 100000] [--pg URL] [--no-pg] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Literal

from bench.store import ALLOC, SPEC
from gpufleet.core.commands import Transition
from gpufleet.model.job import JobState
from gpufleet.server.store import JobUpdate, NewJob, Store
from gpufleet.server.store.backup import create, restore

BATCH = 1_000


def fill(url: str, jobs: int) -> float:
    """Put ``jobs`` jobs in the store at ``url``; the seconds it took."""
    t0 = time.perf_counter()
    with Store.open(url) as store:
        for b in range(0, jobs, BATCH):
            new = [NewJob(SPEC, 1e9 + k, idempotency_key=f"k{k}") for k in range(b, b + BATCH)]
            ids = store.add_jobs(new[: jobs - b])
            now = 2e9
            trans = [
                Transition(i, 1, JobState.PENDING, JobState.STARTING, now, "attempt 1") for i in ids
            ]
            ups = [JobUpdate(i, JobState.STARTING, 1, 0, now, None, 0.0, 0.0, ALLOC) for i in ids]
            store.apply_transitions(trans, ups)
    return time.perf_counter() - t0


@contextmanager
def pg_database(url: str) -> Iterator[str]:
    """A new database beside ``url``'s (a restore goes into schema ``public``), dropped after."""
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    info: dict[str, Any] = {"host": u.host, "port": u.port or 5432, "user": u.username}
    name = f"gf_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**info, dbname=u.database, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield u.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(**info, dbname=u.database, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def one(
    name: str, src: str, dst: str, file: Path, fmt: Literal["custom", "plain"]
) -> dict[str, Any]:
    t0 = time.perf_counter()
    info = create(src, file, fmt)
    t1 = time.perf_counter()
    restore(dst, file)
    t2 = time.perf_counter()
    return {
        "store": name,
        "backup_s": round(t1 - t0, 2),
        "restore_s": round(t2 - t1, 2),
        "file_mb": round(info.size / 1e6, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ap.add_argument("--no-pg", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with ExitStack() as stack:
        d = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        src = f"sqlite:///{d / 'src' / 'gpufleet.db'}"
        filled = fill(src, args.jobs)
        rows.append(
            one("SQLite", src, f"sqlite:///{d / 'dst' / 'gpufleet.db'}", d / "b.db", "custom")
        )
        rows[-1]["fill_s"] = round(filled, 1)
        if not args.no_pg:
            pg = stack.enter_context(pg_database(args.pg))
            filled = fill(pg, args.jobs)
            for fmt in ("custom", "plain"):
                dst = stack.enter_context(pg_database(args.pg))
                label: Literal["custom", "plain"] = "plain" if fmt == "plain" else "custom"
                rows.append(one(f"PostgreSQL, {fmt}", pg, dst, d / f"b.{fmt}", label))
                rows[-1]["fill_s"] = round(filled, 1)
    if args.json:
        print(json.dumps({"jobs": args.jobs, "rows": rows}, indent=2))
        return
    print(f"{args.jobs:,} jobs\n")
    print("| store | backup | restore | file | (filling it) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['store']} | {r['backup_s']} s | {r['restore_s']} s | {r['file_mb']} MB "
            f"| {r['fill_s']} s |"
        )


if __name__ == "__main__":
    main()
