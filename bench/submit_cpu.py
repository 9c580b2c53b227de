"""The controller's CPU per submission (issue 26: on a shared 2-core host the leader's CPU is
what bounds the jobs/s it takes): ``POST /jobs`` through the real application in this process,
ASGI messages handed to it directly (no socket, no client), the service's turn loop storing and
scheduling them as it does in ``gpufleet controller``. Each job waits on a dependency that never
ends (as ``bench/ha_failover.py --load``'s), so the pending queue grows as it does there.

    PYTHONPATH=src .venv/bin/python bench/submit_cpu.py [--n 3000] [--pg] [--profile] [--no-freeze]

``--pg``: PostgreSQL on localhost (a schema of its own, dropped after), else SQLite
(``synchronous=off``: the CPU, not the disk's fsync). Prints the process CPU per submission
(``time.process_time``: this process only, so a loaded host changes it little). The app's start
is frozen as the controller freezes it (ADR 0069); ``--no-freeze``: as it was before."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from gpufleet.server.app import create_app
from gpufleet.server.config import ServerConfig
from gpufleet.server.store import Store

PG = "host=127.0.0.1 user=postgres dbname=test"
WAVE = 64  # submissions in flight at once (the load generator holds 128 connections)


async def post(app: Any, token: str, i: int, gate: str | None) -> tuple[int, bytes]:
    """One ``POST /api/v1/jobs`` as uvicorn hands it to the application: (status, body)."""
    doc: dict[str, Any] = {
        "spec": {"name": f"load-{i}", "gpus_per_worker": 1, "command": ["/bin/true"]},
        "idempotency_key": f"load-{i}",
    }
    if gate:
        doc["depends_on"] = [{"type": "afterok", "job": gate}]
    body = json.dumps(doc).encode()
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode()),
               (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]  # fmt: skip
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/api/v1/jobs",
             "raw_path": b"/api/v1/jobs", "query_string": b"", "root_path": "",
             "headers": headers, "client": ("127.0.0.1", 50000),
             "server": ("127.0.0.1", 8600), "state": {}}  # fmt: skip
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    out: dict[str, Any] = {"body": b""}

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # no disconnect while the answer is written
        raise AssertionError

    async def send(m: dict[str, Any]) -> None:
        if m["type"] == "http.response.start":
            out["status"] = m["status"]
        else:
            out["body"] += m.get("body", b"")

    await app(scope, receive, send)
    return int(out["status"]), bytes(out["body"])


async def run(url: str, data: Path, n: int, profile: bool, freeze: bool = True) -> None:
    store = Store.open(url)
    app = create_app(ServerConfig(data_dir=data, db_url=url), store=store)
    if freeze:  # as `gpufleet controller` does once its app is built (ADR 0069)
        gc.collect()
        gc.freeze()
    async with app.router.lifespan_context(app):
        token = (data / "admin.token").read_text().strip()
        _, body = await post(app, token, -1, None)
        gate = json.loads(body)["ids"][0]
        await asyncio.gather(*(post(app, token, i, gate) for i in range(200)))  # warm
        prof = cProfile.Profile() if profile else None
        wall, cpu = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        for first in range(200, n + 200, WAVE):
            wave = range(first, min(first + WAVE, n + 200))
            answers = await asyncio.gather(*(post(app, token, i, gate) for i in wave))
            assert all(status == 201 for status, _ in answers), answers[0]
        if prof is not None:
            prof.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    store.close()
    print(f"{n} submissions: {cpu / n * 1000:.3f} ms CPU each ({n / wall:.0f}/s wall)")
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--pg", action="store_true", help="PostgreSQL on localhost, not SQLite")
    ap.add_argument("--profile", action="store_true", help="cProfile the timed submissions")
    ap.add_argument("--no-freeze", action="store_true", help="no gc.freeze() after the start")
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="gpufleet-submit-cpu-"))
    if not args.pg:
        asyncio.run(run(f"sqlite:///{data}/gpufleet.db?synchronous=off", data, args.n,
                        args.profile, not args.no_freeze))  # fmt: skip
        return
    schema = f"gf_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG, autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"')
    try:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
        asyncio.run(run(url, data, args.n, args.profile, not args.no_freeze))
    finally:
        with psycopg.connect(PG, autocommit=True) as pg:
            pg.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
