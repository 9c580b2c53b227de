"""bench/live.py heartbeats: A agents registered by one load-generator process, each
heartbeating every ``period`` s with 8 simulated H100s' metrics and long-polling its commands;
the controller's CPU over the measured window (bench/live.py's docstring says more)."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpufleet.api.schemas import TokenCreate

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live_common import API, CpuMeter, Http, cluster, pct

HOST = {  # the host part of each heartbeat's metrics, the same for every agent
    "cpu_percent": 3.0,
    "load1": 0.5,
    "memory_total_bytes": 2.7e11,
    "memory_used_bytes": 2.1e10,
    "disk_total_bytes": 2.0e12,
    "disk_used_bytes": 4.0e11,
    "net_rx_bytes": 1.2e9,
    "net_tx_bytes": 9.0e8,
}


async def _agents(
    port: int,
    tokens: list[tuple[str, str]],
    warm_s: float,
    seconds: float,
    period: float,
    meter: CpuMeter,
) -> dict[str, Any]:
    """Register every agent, run them all; measure over ``seconds`` after ``warm_s``."""
    fleet = _Fleet(port, tokens, period, meter)
    sem = asyncio.Semaphore(16)

    async def reg(name: str, token: str) -> None:
        async with sem:
            await fleet.register(name, token)

    t_reg = time.monotonic()
    await asyncio.gather(*(reg(n, t) for n, t in tokens))
    fleet.stats["register_s"] = time.monotonic() - t_reg
    fleet.measure_at = time.monotonic() + warm_s
    fleet.stop_at = fleet.measure_at + seconds
    await asyncio.gather(
        fleet.measure(seconds),
        *(fleet.beat(i, n, t) for i, (n, t) in enumerate(tokens)),
        *(fleet.poll(n, t) for n, t in tokens),
    )
    fleet.stats["hb_p50_ms"] = pct(fleet.lat, 50) * 1e3
    fleet.stats["hb_p99_ms"] = pct(fleet.lat, 99) * 1e3
    return fleet.stats


class _Fleet:
    """The simulated agents of one run: their GPUs, and what their requests met."""

    def __init__(
        self, port: int, tokens: list[tuple[str, str]], period: float, meter: CpuMeter
    ) -> None:
        from gpufleet.agent.simgpu import SimulatedGpus

        self.port = port
        self.count = len(tokens)
        self.period = period
        self.meter = meter
        self.gpus = {name: SimulatedGpus.from_spec("8xH100", name) for name, _ in tokens}
        self.t_start = time.time()
        self.stats: dict[str, Any] = {"heartbeats": 0, "hb_errors": 0, "polls": 0, "poll_errors": 0}
        self.lat: list[float] = []
        self.measure_at = self.stop_at = 0.0

    async def register(self, name: str, token: str) -> None:
        g = self.gpus[name]
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
        h = await Http(self.port, token).open()
        st, text = await h.call("POST", f"{API}/agent/register", json.dumps(body).encode())
        h.close()
        if st != 200:
            raise RuntimeError(f"register {name}: {st} {text[:200]!r}")

    async def beat(self, i: int, name: str, token: str) -> None:
        from gpufleet.agent.gpu import metrics_payload

        h = await Http(self.port, token).open()
        g = self.gpus[name]
        await asyncio.sleep(self.period * i / self.count)
        nxt = time.monotonic()
        try:
            while nxt < self.stop_at:
                now = time.time() - self.t_start
                body = {
                    "health": {"healthy": True},
                    "metrics": metrics_payload(g.sample(now), {}, HOST),
                    "running": [],
                }
                t0 = time.monotonic()
                st, _ = await h.call(
                    "POST", f"{API}/agent/{name}/heartbeat", json.dumps(body).encode()
                )
                if t0 >= self.measure_at:
                    self.lat.append(time.monotonic() - t0)
                    self.stats["heartbeats" if st == 200 else "hb_errors"] += 1
                nxt += self.period
                await asyncio.sleep(max(0.0, nxt - time.monotonic()))
        finally:
            h.close()

    async def poll(self, name: str, token: str) -> None:
        h = await Http(self.port, token).open()
        try:
            while time.monotonic() < self.stop_at:
                wait = min(20.0, max(0.0, self.stop_at - time.monotonic()))
                st, _ = await h.call("GET", f"{API}/agent/{name}/commands?wait={wait:.1f}")
                self.stats["polls" if st == 200 else "poll_errors"] += 1
        finally:
            h.close()

    async def measure(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, self.measure_at - time.monotonic()))
        self.meter.start()
        await asyncio.sleep(max(0.0, self.stop_at - time.monotonic()))
        self.stats["cpu"] = self.meter.stop()
        self.stats["seconds"] = seconds


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
