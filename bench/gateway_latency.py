"""What the service gateway costs, on 127.0.0.1 with two backend processes (Python http.server):

1. ``latency``: an open-loop load at a fixed rate (default 1,000 req/s, keep-alive), once
   straight at the backends (the client alternating between them) and once through each
   gateway; the gateway's added p50/p99 is the difference. Latency is counted from each
   request's scheduled send time, so a stall shows (no coordinated omission).
2. ``throughput``: closed-loop, 16 keep-alive connections, for the requests/s each path
   carries (bounded by the Python backends, so it is a floor for the proxy, not its limit).
3. ``kill``: 200 req/s through the gateway; one backend is SIGKILLed, then ``apply()`` lists
   only the other: failed requests, and the time from the kill to the last failure.

The load generator runs in its own process (``python bench/gateway_latency.py
load ...``) so the built-in proxy's thread does not share its interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpufleet.gateway import KINDS, Backend, Gateway, GatewayError, ServiceRoute, make_gateway
from gpufleet.ops.http_backends import BackendProcess, free_port

TOKEN = "bench-token-0123456789abcdef"
MAX_CONNS = 64


async def _request(
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], req: bytes
) -> tuple[int, bool]:
    """One GET on a keep-alive connection: (status, whether the connection may be reused)."""
    r, w = conn
    w.write(req)
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    keep = True
    for line in head.split(b"\r\n")[1:]:
        low = line.lower()
        if low.startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        elif low.startswith(b"connection:") and b"close" in low:
            keep = False
    await r.readexactly(length)
    return int(head.split(b" ")[1]), keep


async def _open_loop(targets: list[tuple[str, int]], rate: float, seconds: float) -> dict[str, Any]:
    reqs = [
        (f"GET / HTTP/1.1\r\nHost: {h}:{p}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").encode()
        for h, p in targets
    ]
    idle: list[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = [[] for _ in targets]
    lat: list[float] = []
    failures: list[tuple[float, str]] = []
    opened = 0
    resent = 0
    t0 = time.monotonic() + 0.2

    async def one(i: int, at: float) -> None:
        nonlocal opened, resent
        k = i % len(targets)
        conn = idle[k].pop() if idle[k] else None
        for _attempt in range(2):
            reused = conn is not None
            try:
                if conn is None:
                    opened += 1
                    conn = await asyncio.open_connection(*targets[k])
                status, keep = await _request(conn, reqs[k])
            except asyncio.IncompleteReadError as e:
                conn[1].close()  # type: ignore[index]
                conn = None
                if reused and not e.partial:
                    # an idle keep-alive connection the server closed as we sent on it: no
                    # byte came back, so the GET goes again on a new one (as HTTP clients do)
                    resent += 1
                    continue
                failures.append((at, "closed mid-response" if e.partial else "closed, no answer"))
                return
            except OSError as e:
                if conn is not None:
                    conn[1].close()
                failures.append((at, type(e).__name__))
                return
            if status != 200:
                failures.append((at, f"HTTP {status}"))
                conn[1].close()
                return
            lat.append(time.monotonic() - at)
            if keep:
                idle[k].append(conn)
            else:
                conn[1].close()
            return

    tasks = []
    n = int(rate * seconds)
    for i in range(n):
        at = t0 + i / rate
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, at)))
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - t0
    return {
        "sent": n,
        "ok": len(lat),
        "elapsed_s": elapsed,
        "lat_s": lat,
        "failures": failures,
        "connections": opened,
        "resent": resent,
    }


async def _closed_loop(
    targets: list[tuple[str, int]], conns: int, seconds: float
) -> dict[str, Any]:
    done = 0
    errors = 0
    end = time.monotonic() + seconds

    async def worker(k: int) -> None:
        nonlocal done, errors
        h, p = targets[k % len(targets)]
        req = f"GET / HTTP/1.1\r\nHost: {h}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        conn = await asyncio.open_connection(h, p)
        while time.monotonic() < end:
            try:
                status, keep = await _request(conn, req)
                done += status == 200
                errors += status != 200
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                keep = False
            if not keep:
                conn[1].close()
                conn = await asyncio.open_connection(h, p)
        conn[1].close()

    t0 = time.monotonic()
    await asyncio.gather(*(worker(k) for k in range(conns)))
    return {"ok": done, "errors": errors, "rps": done / (time.monotonic() - t0)}


def load(targets: list[tuple[str, int]], mode: str, rate: float, seconds: float) -> dict[str, Any]:
    """Run the load generator in a child process; its JSON result."""
    spec = json.dumps({"targets": targets, "mode": mode, "rate": rate, "seconds": seconds})
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "load", spec],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def start_load(
    targets: list[tuple[str, int]], rate: float, seconds: float
) -> subprocess.Popen[str]:
    spec = json.dumps({"targets": targets, "mode": "open", "rate": rate, "seconds": seconds})
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "load", spec],
        stdout=subprocess.PIPE,
        text=True,
    )


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def summary(res: dict[str, Any]) -> dict[str, Any]:
    lat = res["lat_s"]
    return {
        "sent": res["sent"],
        "ok": res["ok"],
        "failed": len(res["failures"]),
        "achieved_rps": round(res["ok"] / res["elapsed_s"], 1),
        "p50_ms": round(pct(lat, 0.5) * 1000, 3),
        "p99_ms": round(pct(lat, 0.99) * 1000, 3),
        "mean_ms": round(statistics.fmean(lat) * 1000, 3) if lat else None,
        "connections": res["connections"],
        "resent_on_closed_keepalive": res["resent"],
    }


def run(kinds: list[str], rate: float, seconds: float, kill_rate: float) -> dict[str, Any]:
    backs = [BackendProcess("b0"), BackendProcess("b1")]
    direct = [("127.0.0.1", b.port) for b in backs]
    report: dict[str, Any] = {"machine": platform.node(), "rate": rate, "seconds": seconds}
    try:
        report["direct"] = summary(load(direct, "open", rate, seconds))
        report["direct_throughput"] = load(direct, "closed", 16, 5)
        for kind in kinds:
            try:
                gw = make_gateway(kind)
            except GatewayError as e:
                report[kind] = {"skipped": str(e)}
                continue
            gw.start()
            try:
                port = free_port()
                routes = [Backend.parse(b.address) for b in backs]
                gw.apply([ServiceRoute("bench", port, TOKEN, tuple(routes))])
                via = [("127.0.0.1", port)]
                s = summary(load(via, "open", rate, seconds))
                s["added_p50_ms"] = round(s["p50_ms"] - report["direct"]["p50_ms"], 3)
                s["added_p99_ms"] = round(s["p99_ms"] - report["direct"]["p99_ms"], 3)
                s["throughput"] = load(via, "closed", 16, 5)
                s["kill"] = kill(gw, port, backs, kill_rate)
                report[kind] = s
            finally:
                gw.stop()
            backs[0] = BackendProcess("b0")  # the kill took it: a fresh one for the next kind
            direct[0] = ("127.0.0.1", backs[0].port)
    finally:
        for b in backs:
            b.kill()
    return report


def kill(gw: Gateway, port: int, backs: list[BackendProcess], rate: float) -> dict[str, Any]:
    """SIGKILL the first backend 3 s into 10 s of load, then apply() without it."""
    proc = start_load([("127.0.0.1", port)], rate, 10)
    time.sleep(0.2 + 3)  # the load generator starts its clock 0.2 s after it starts
    t_kill = time.monotonic()
    backs[0].kill()
    rest = tuple(Backend.parse(b.address) for b in backs[1:])
    gw.apply([ServiceRoute("bench", port, TOKEN, rest)])
    apply_s = time.monotonic() - t_kill
    out, _ = proc.communicate()
    res = json.loads(out)
    # CLOCK_MONOTONIC is one clock for every process on the machine: times compare directly
    after = [t - t_kill for t, _ in res["failures"]]
    return {
        "sent": res["sent"],
        "failed": len(res["failures"]),
        "failure_kinds": sorted({why for _, why in res["failures"]}),
        "apply_s": round(apply_s, 3),
        "resent_on_closed_keepalive": res["resent"],
        # a failure's time is its scheduled send time: negative = sent before the kill
        "failures_at_s_after_kill": [round(t, 3) for t in sorted(after)],
        "p99_ms": round(pct(res["lat_s"], 0.99) * 1000, 3),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["load"]:
        spec = json.loads(argv[1])
        targets = [tuple(t) for t in spec["targets"]]
        if spec["mode"] == "open":
            res = asyncio.run(_open_loop(targets, spec["rate"], spec["seconds"]))
        else:
            res = asyncio.run(_closed_loop(targets, int(spec["rate"]), spec["seconds"]))
        print(json.dumps(res))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--kill-rate", type=float, default=200.0)
    a = ap.parse_args(argv)
    report = run(a.kinds.split(","), a.rate, a.seconds, a.kill_rate)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
