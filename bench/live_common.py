"""What bench/live.py's measurements share: the database a run uses, a fresh cluster, the CPU
each part of it takes, and a minimal asyncio HTTP/1.1 client (so that a load generator takes as
little of the shared CPU as it can)."""

from __future__ import annotations

import asyncio
import os
import platform
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from gpufleet.ops.localcluster import LocalCluster

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
API = "/api/v1"


# ----- helpers ---------------------------------------------------------------------------------


def machine() -> str:
    mem = psutil.virtual_memory().total / 2**30
    return (
        f"{psutil.cpu_count(logical=True)} cores, {mem:.0f} GiB, Python {platform.python_version()}"
    )


def pct(xs: list[float], p: float) -> float:
    """The p-th percentile (nearest rank), p in 0..100."""
    ys = sorted(xs)
    k = max(0, min(len(ys) - 1, round(p / 100 * len(ys) + 0.5) - 1))
    return ys[k]


@contextmanager
def database(kind: str) -> Iterator[str]:
    """'' (SQLite in the controller's data dir) or a PostgreSQL URL on a fresh schema."""
    if kind == "sqlite":
        yield ""
        return
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(PG_URL)
    info: dict[str, Any] = {
        "host": u.host,
        "port": u.port or 5432,
        "user": u.username,
        "dbname": u.database,
    }
    schema = f"gf_live_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**info, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(**info, autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def cluster(tmp: str, agents: int, db_url: str, **kw: Any) -> LocalCluster:
    """The controller's own defaults for the intervals unless a benchmark says otherwise."""
    kw = {"heartbeat_s": 3.0, "lease_s": 7.0, "node_grace_s": 10.0, **kw}
    kw.setdefault("schedule_interval_s", 5.0)
    return LocalCluster(Path(tmp), agents=agents, db_url=db_url, **kw)


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


class CpuMeter:
    """CPU seconds of the controller, of this load generator, of the agents we started and of
    the whole machine (what other processes on the shared box took is the difference)."""

    def __init__(self, lc: LocalCluster) -> None:
        assert lc.controller is not None
        self.ctrl = lc.controller.pid
        self.agents = [a.proc.pid for a in lc.agent_procs.values()]
        self.t0 = self.c0 = self.me0 = self.ag0 = self.all0 = 0.0
        self.pg0: dict[int, float] = {}

    @staticmethod
    def _postgres() -> dict[int, float]:
        out = {}
        for p in psutil.process_iter(["name"]):
            if p.info["name"] in ("postgres", "postmaster"):
                with suppress(psutil.Error):
                    out[p.pid] = cpu_s(p.pid)
        return out

    @staticmethod
    def _machine() -> float:
        t = psutil.cpu_times()
        return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))

    def _agents(self) -> float:
        return sum(cpu_s(p) for p in self.agents)

    def start(self) -> None:
        self.t0, self.c0, self.me0 = time.monotonic(), cpu_s(self.ctrl), cpu_s(os.getpid())
        self.ag0, self.all0, self.pg0 = self._agents(), self._machine(), self._postgres()

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        c, me = cpu_s(self.ctrl) - self.c0, cpu_s(os.getpid()) - self.me0
        ag, al = self._agents() - self.ag0, self._machine() - self.all0
        pg = sum(t - self.pg0.get(pid, 0.0) for pid, t in self._postgres().items())
        return {
            "controller_cpu_cores": c / wall,
            "loadgen_cpu_cores": me / wall,
            "agents_cpu_cores": ag / wall,
            "postgres_cpu_cores": pg / wall,  # the server's processes (all databases)
            "others_cpu_cores": max(0.0, al - c - me - ag - pg) / wall,
        }


class Http:
    """One keep-alive HTTP/1.1 connection, just enough of the protocol for uvicorn's answers
    (Content-Length bodies). The load generator's CPU is the server's CPU on a shared box."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.head = f"Host: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None
        self.used = 0.0

    async def open(self) -> Http:
        self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        self.used = time.monotonic()
        return self

    async def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        extra = (
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            if body is not None
            else ""
        )
        msg = f"{method} {path} HTTP/1.1\r\n{self.head}{extra}\r\n".encode() + (body or b"")
        if time.monotonic() - self.used > 4.0:  # uvicorn drops a connection idle for 5 s
            self.close()
            await self.open()
        try:
            return await self._send(msg)
        except (ConnectionError, asyncio.IncompleteReadError, IndexError):
            # closed by the server while idle (as httpx does: reconnect and send again)
            self.close()
            await self.open()
            return await self._send(msg)

    async def _send(self, msg: bytes) -> tuple[int, bytes]:
        assert self.r is not None and self.w is not None
        self.w.write(msg)
        status = int((await self.r.readline()).split()[1])
        n = 0
        while True:
            line = await self.r.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
        data = await self.r.readexactly(n) if n else b""
        self.used = time.monotonic()
        return status, data

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
