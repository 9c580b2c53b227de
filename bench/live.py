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
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live_common import API, CpuMeter, Http, cluster, database, machine, pct
from bench.live_heartbeats import heartbeats_once

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
