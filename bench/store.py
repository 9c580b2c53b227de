"""Store throughput: jobs/s through ``Store.add_jobs`` and transitions/s through
``Store.apply_transitions``, in batches of 1, 10 and 100 (a batch is one transaction: what the
server's group commit hands the store), on SQLite (a file in a tmp dir; synchronous FULL, the
default, and NORMAL) and PostgreSQL (a fresh schema, dropped after).

Each job carries an idempotency key, as API submissions do; each transition is PENDING →
STARTING with the full row update (state, attempt, times, a 2-worker allocation).

    .venv/bin/python bench/store.py [--n 10000] [--repeat 3] [--pg postgresql://...] [--no-pg]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from gpufleet.core.commands import Transition
from gpufleet.model.allocation import Placement
from gpufleet.model.job import JobSpec, JobState
from gpufleet.server.store import JobUpdate, NewJob, Store

SPEC = JobSpec(
    "train",
    "alice",
    "vision",
    workers=2,
    gpus_per_worker=8,
    command=("torchrun", "--nproc-per-node=8", "train.py", "--epochs=3"),
    env=(("NCCL_DEBUG", "WARN"), ("OMP_NUM_THREADS", "8")),
    time_limit_s=86400.0,
    max_retries=2,
)
ALLOC = (
    Placement("gpu-017", tuple(range(8)), 1000, 16000, 131072),
    Placement("gpu-018", tuple(range(8)), 1000, 16000, 131072),
)


def bench_one(store: Store, n: int, batch: int) -> tuple[float, float, float, float]:
    """jobs/s, transitions/s, and this process's CPU µs per job and per transition, for n jobs
    and n transitions in batches of ``batch``."""
    ids: list[str] = []
    c0 = time.process_time()
    t0 = time.perf_counter()
    for b in range(0, n, batch):
        new = [NewJob(SPEC, 1e9 + k, idempotency_key=f"k{k}") for k in range(b, min(n, b + batch))]
        ids += store.add_jobs(new)
    t1 = time.perf_counter()
    c1 = time.process_time()
    now = 2e9
    for b in range(0, n, batch):
        chunk = ids[b : b + batch]
        trans = [
            Transition(i, 1, JobState.PENDING, JobState.STARTING, now, "attempt 1") for i in chunk
        ]
        ups = [JobUpdate(i, JobState.STARTING, 1, 0, now, None, 0.0, 0.0, ALLOC) for i in chunk]
        store.apply_transitions(trans, ups)
    t2 = time.perf_counter()
    c2 = time.process_time()
    return n / (t1 - t0), n / (t2 - t1), (c1 - c0) / n * 1e6, (c2 - c1) / n * 1e6


@contextmanager
def sqlite_db(sync: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        yield f"sqlite:///{Path(d) / 'gpufleet.db'}?synchronous={sync}"


@contextmanager
def pg_db(url: str) -> Iterator[str]:
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    info: dict[str, Any] = {
        "host": u.host,
        "port": u.port or 5432,
        "user": u.username,
        "dbname": u.database,
    }
    schema = f"gf_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**info, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(**info, autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--batches", default="1,10,100")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is shown")
    ap.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ap.add_argument("--no-pg", action="store_true")
    ap.add_argument("--only-pg", action="store_true")
    args = ap.parse_args()
    backends: list[tuple[str, Callable[[], AbstractContextManager[str]]]] = [
        ("SQLite, synchronous=FULL (default)", lambda: sqlite_db("full")),
        ("SQLite, synchronous=NORMAL", lambda: sqlite_db("normal")),
    ]
    if args.only_pg:
        backends = []
    if not args.no_pg:
        backends.append(("PostgreSQL 15, localhost", lambda: pg_db(args.pg)))
    print(f"{args.n} jobs, then {args.n} transitions; one transaction per batch;")
    print(f"median (min-max) of {args.repeat} runs, each on a fresh database\n")
    print("| backend | batch | jobs/s | transitions/s | CPU µs/job | CPU µs/transition |")
    print("|---|---|---|---|---|---|")
    for name, db in backends:
        for batch in (int(x) for x in args.batches.split(",")):
            runs = []
            for _ in range(args.repeat):
                with db() as url:
                    store = Store.open(url)
                    try:
                        runs.append(bench_one(store, args.n, batch))
                    finally:
                        store.close()
            rates = " | ".join(_cell([r[k] for r in runs]) for k in (0, 1))
            cpu = " | ".join(f"{statistics.median(r[k] for r in runs):.0f}" for k in (2, 3))
            print(f"| {name} | {batch} | {rates} | {cpu} |", flush=True)


def _cell(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"


if __name__ == "__main__":
    main()
