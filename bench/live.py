"""The live cluster's figures (issue 6), measured with real processes on 127.0.0.1: a controller
process (``gpufleet controller``, uvicorn) and agent processes, as ``ops.LocalCluster`` starts them.

    .venv/bin/python bench/live.py latency    [--n 200] [--agents 16] [--repeat 3]
    .venv/bin/python bench/live.py submit     [--n 20000] [--conns 32] [--db sqlite|pg] [--agents 2]
    .venv/bin/python bench/live.py heartbeats [--agents 500] [--seconds 60] [--repeat 3]

latency: 16 agents with simulated 8xH100 nodes; N one-GPU jobs one after another, each submitted
once the previous one is RUNNING (the cluster stays idle: 128 GPUs, jobs of 0.5 s). Reported:
controller-side (the job's submit time → its RUNNING event, both from GET /jobs/{id}) and
client-side (the client's send → the first poll that sees RUNNING, polling every 5 ms).
Controller and client run on the same host, so both use the same wall clock.

submit: 2 agents (16 GPUs: 16 jobs run, the rest stays PENDING, as a full cluster's queue does);
one load-generator process with K keep-alive connections (a minimal asyncio HTTP/1.1 client, so
that the load generator takes as little of the shared CPU as it can) posts N single-job
submissions; jobs accepted (201) per second, and the mean batch a service turn took
(submissions / turns, from /healthz).

heartbeats: one load-generator process registers A agents (one agent token each), then every
agent heartbeats every 5 s (spread evenly) with 8 simulated H100s' metrics in the agent's own
payload (``gpufleet.agent.gpu.metrics_payload`` of ``SimulatedGpus`` samples) and long-polls its
commands (wait 20 s, as the agent does) for S seconds; the controller process's CPU is
psutil ``cpu_times`` (user + system) over the measured window / wall time.

CPU figures: the controller, this process, the agents, PostgreSQL's processes and the rest of
the machine (``others_cpu_cores``: on a shared box, what other work took meanwhile).

Every run starts a fresh controller (fresh SQLite file or PostgreSQL schema) and stops its
processes at the end; each loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from gpufleet.api.schemas import TokenCreate
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


# ----- 1. submit → running latency -------------------------------------------------------------


def latency_once(n: int, agents: int, heartbeat_s: float, poll_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        lc = cluster(tmp, agents, "", heartbeat_s=heartbeat_s)
        try:
            lc.start()
            user = lc.user("bench")
            spec = {
                "name": "lat",
                "queue": "default",
                "gpus_per_worker": 1,
                "command": ["sleep", "0.5"],
            }
            ctrl_ms: list[float] = []
            send_ms: list[float] = []
            rt_ms: list[float] = []
            start_ms: list[float] = []
            for _ in range(n):
                t_send = time.time()
                (jid,) = user.submit(spec)
                deadline = time.monotonic() + 30
                while True:
                    j = user.job(jid)
                    if j.state not in ("PENDING", "STARTING"):
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"job {jid} still {j.state} after 30 s")
                    time.sleep(poll_s)
                t_seen = time.time()
                ev = {e.state: e.time for e in j.events or []}
                if "RUNNING" not in ev:
                    raise RuntimeError(f"job {jid} never RUNNING: {j.events}")
                ctrl_ms.append((ev["RUNNING"] - j.submit_time) * 1e3)
                start_ms.append((ev["STARTING"] - j.submit_time) * 1e3)
                send_ms.append((ev["RUNNING"] - t_send) * 1e3)
                rt_ms.append((t_seen - t_send) * 1e3)
            user.close()
        finally:
            lc.stop()
    return {
        "n": n,
        "controller_p50_ms": pct(ctrl_ms, 50),
        "controller_p99_ms": pct(ctrl_ms, 99),
        "starting_p50_ms": pct(start_ms, 50),
        "send_to_running_p50_ms": pct(send_ms, 50),
        "send_to_running_p99_ms": pct(send_ms, 99),
        "client_p50_ms": pct(rt_ms, 50),
        "client_p99_ms": pct(rt_ms, 99),
        "client_max_ms": max(rt_ms),
    }


# ----- 2. sustained submissions per second -----------------------------------------------------


async def _submit_load(
    port: int, token: str, n: int, conns: int, max_s: float = 600.0
) -> tuple[float, int, list[int]]:
    body = json.dumps(
        {
            "spec": {
                "name": "load",
                "queue": "default",
                "gpus_per_worker": 1,
                "command": ["sleep", "3600"],
            }
        }
    ).encode()
    left = n
    ok = 0
    bad: list[int] = []

    stop_at = time.monotonic() + max_s

    async def worker() -> None:
        nonlocal left, ok
        h = await Http(port, token).open()
        try:
            while left > 0 and time.monotonic() < stop_at:
                left -= 1
                status, _ = await h.call("POST", f"{API}/jobs", body)
                if status == 201:
                    ok += 1
                else:
                    bad.append(status)
        finally:
            h.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conns)))
    return time.perf_counter() - t0, ok, bad


def submit_once(n: int, conns: int, db: str, max_s: float, agents: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, database(db) as url:
        lc = cluster(tmp, agents, url)
        try:
            lc.start()
            user = lc.user("bench")
            token = user.http.headers["authorization"].split()[1]
            user.close()
            # warm up (first requests import and compile lazily)
            asyncio.run(_submit_load(lc.port, token, 200, 4))
            with lc.admin() as a:
                turns0 = a.health()["turns"]
            meter = CpuMeter(lc)
            meter.start()
            wall, ok, bad = asyncio.run(_submit_load(lc.port, token, n, conns, max_s))
            cpu = meter.stop()
            with lc.admin() as a:
                h = a.health()
            turns = h["turns"] - turns0
        finally:
            lc.stop()
    return {
        "n": n,
        "accepted": ok,
        "refused": len(bad),
        "jobs_per_s": ok / wall,
        "wall_s": wall,
        **cpu,
        "turns": turns,
        "mean_batch": ok / max(1, turns),
        "jobs_in_controller": h["jobs"],
    }


# ----- 3. 500 agents heartbeating --------------------------------------------------------------


async def _agents(
    port: int,
    tokens: list[tuple[str, str]],
    warm_s: float,
    seconds: float,
    period: float,
    meter: CpuMeter,
) -> dict[str, Any]:
    """Register every agent, run them all; measure over ``seconds`` after ``warm_s``."""
    from gpufleet.agent.gpu import metrics_payload
    from gpufleet.agent.simgpu import SimulatedGpus

    gpus = {name: SimulatedGpus.from_spec("8xH100", name) for name, _ in tokens}
    host = {
        "cpu_percent": 3.0,
        "load1": 0.5,
        "memory_total_bytes": 2.7e11,
        "memory_used_bytes": 2.1e10,
        "disk_total_bytes": 2.0e12,
        "disk_used_bytes": 4.0e11,
        "net_rx_bytes": 1.2e9,
        "net_tx_bytes": 9.0e8,
    }
    t_start = time.time()
    stats: dict[str, Any] = {"heartbeats": 0, "hb_errors": 0, "polls": 0, "poll_errors": 0}
    lat: list[float] = []

    async def register(name: str, token: str) -> None:
        g = gpus[name]
        info = g.discover()
        body = {
            "node": name,
            "address": "127.0.0.1",
            "gpu_model": info[0].model,
            "gpus": [x.model_dump() for x in info],
            "cpu_cores": 128,
            "memory_gib": 2048,
            "leaf": f"leaf-{int(name.split('-')[1]) // 32}",
            "driver_version": g.driver_version(),
            "cuda_version": g.cuda_version(),
        }
        h = await Http(port, token).open()
        st, text = await h.call("POST", f"{API}/agent/register", json.dumps(body).encode())
        h.close()
        if st != 200:
            raise RuntimeError(f"register {name}: {st} {text[:200]!r}")

    sem = asyncio.Semaphore(16)

    async def reg(name: str, token: str) -> None:
        async with sem:
            await register(name, token)

    t_reg = time.monotonic()
    await asyncio.gather(*(reg(n, t) for n, t in tokens))
    stats["register_s"] = time.monotonic() - t_reg
    measure_at = time.monotonic() + warm_s
    stop_at = measure_at + seconds

    async def beat(i: int, name: str, token: str) -> None:
        h = await Http(port, token).open()
        g = gpus[name]
        await asyncio.sleep(period * i / len(tokens))
        nxt = time.monotonic()
        try:
            while nxt < stop_at:
                now = time.time() - t_start
                body = {
                    "health": {"healthy": True},
                    "metrics": metrics_payload(g.sample(now), {}, host),
                    "running": [],
                }
                t0 = time.monotonic()
                st, _ = await h.call(
                    "POST", f"{API}/agent/{name}/heartbeat", json.dumps(body).encode()
                )
                if t0 >= measure_at:
                    lat.append(time.monotonic() - t0)
                    stats["heartbeats" if st == 200 else "hb_errors"] += 1
                nxt += period
                await asyncio.sleep(max(0.0, nxt - time.monotonic()))
        finally:
            h.close()

    async def poll(name: str, token: str) -> None:
        h = await Http(port, token).open()
        try:
            while time.monotonic() < stop_at:
                wait = min(20.0, max(0.0, stop_at - time.monotonic()))
                st, _ = await h.call("GET", f"{API}/agent/{name}/commands?wait={wait:.1f}")
                stats["polls" if st == 200 else "poll_errors"] += 1
        finally:
            h.close()

    async def measure() -> None:
        await asyncio.sleep(max(0.0, measure_at - time.monotonic()))
        meter.start()
        await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
        stats["cpu"] = meter.stop()
        stats["seconds"] = seconds

    await asyncio.gather(
        measure(),
        *(beat(i, n, t) for i, (n, t) in enumerate(tokens)),
        *(poll(n, t) for n, t in tokens),
    )
    stats["hb_p50_ms"] = pct(lat, 50) * 1e3
    stats["hb_p99_ms"] = pct(lat, 99) * 1e3
    return stats


def heartbeats_once(agents: int, seconds: float, period: float, warm_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        lc = cluster(
            tmp, 0, "", heartbeat_s=period, lease_s=period * 2, node_grace_s=period * 3 + 2
        )
        try:
            lc.start()
            assert lc.controller is not None
            tokens = []
            with lc.admin() as a:
                for i in range(agents):
                    name = f"node-{i}"
                    t = a.create_token(TokenCreate(name=f"agent-{name}", role="agent", node=name))
                    tokens.append((name, t.token or ""))
            box = asyncio.run(_agents(lc.port, tokens, warm_s, seconds, period, CpuMeter(lc)))
            with lc.admin() as a:
                nodes = [x for x in a.nodes() if x.state != "lost"]
        finally:
            lc.stop()
    cpu = box.pop("cpu")
    return {
        "agents": agents,
        "nodes_alive_at_end": len(nodes),
        **cpu,
        "heartbeats_per_s": box["heartbeats"] / box["seconds"],
        **box,
    }


# ----- main ------------------------------------------------------------------------------------


def report(name: str, runs: list[dict[str, Any]]) -> None:
    print(f"\n{name}: median of {len(runs)} runs ({machine()})")
    for k in runs[0]:
        xs = [r[k] for r in runs]
        if all(isinstance(x, int | float) for x in xs):
            each = ", ".join(f"{x:.2f}" for x in xs)
            print(f"  {k:28s} {statistics.median(xs):12.2f}   runs: {each}")
    sys.stdout.flush()


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks: processes stopped


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("latency")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--heartbeat-s", type=float, default=3.0)
    p.add_argument("--poll-s", type=float, default=0.005)
    p.add_argument("--repeat", type=int, default=3)
    p = sub.add_parser("submit")
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--conns", type=int, default=32)
    p.add_argument("--db", choices=("sqlite", "pg"), default="sqlite")
    p.add_argument("--max-s", type=float, default=600.0, help="stop sending after this long")
    p.add_argument("--agents", type=int, default=2, help="8-GPU nodes; the rest stays PENDING")
    p.add_argument("--repeat", type=int, default=3)
    p = sub.add_parser("heartbeats")
    p.add_argument("--agents", type=int, default=500)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--period-s", type=float, default=5.0)
    p.add_argument("--warm-s", type=float, default=10.0)
    p.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    runs = []
    for i in range(a.repeat):
        if a.what == "latency":
            r = latency_once(a.n, a.agents, a.heartbeat_s, a.poll_s)
        elif a.what == "submit":
            r = submit_once(a.n, a.conns, a.db, a.max_s, a.agents)
        else:
            r = heartbeats_once(a.agents, a.seconds, a.period_s, a.warm_s)
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
        print(f"run {i + 1}: {json.dumps(shown)}", flush=True)
        runs.append(r)
    print(f"load average at the end: {os.getloadavg()}")
    report(f"{a.what} {' '.join(sys.argv[2:])}".strip(), runs)


if __name__ == "__main__":
    main()
