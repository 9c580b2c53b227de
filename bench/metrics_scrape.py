"""How long one scrape of the controller's /metrics takes for a big cluster (issue 4: 1,000
nodes x 8 GPUs within 1 s).

Builds the state in-process, without agents or HTTP: a ``ControllerService`` whose core knows
N nodes (``NodeUp``), with jobs submitted, scheduled and started through the core (so most GPUs
carry ``hpc_job``/``queue``/``user`` labels) and more pending behind them, and each node's
latest heartbeat metrics made by the simulated GPU backend (the payload real agents send: every
dcgm field of 8 GPUs plus the host's figures). Then times ``FleetCollector.render()`` — what the
/metrics handler does — cold each time (every heartbeat replaced first, as between two real
scrapes), and reports the median, the worst, the CPU time, the samples and the bytes.

    .venv/bin/python bench/metrics_scrape.py [--nodes 1000] [--gpus 8] [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import cast

from gpufleet.agent.gpu import metrics_payload
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.core.commands import Launch
from gpufleet.core.events import JobSubmitted, NodeUp, TaskStarted
from gpufleet.model.catalog import lookup
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI, Resources
from gpufleet.scheduler.framework import Profile
from gpufleet.server.logs import LogStore
from gpufleet.server.metrics import FleetCollector
from gpufleet.server.service import ControllerService, NodeLink
from gpufleet.server.service.store import Store

T0 = 1_700_000_000.0
HOST = {
    "cpu_percent": 37.5,
    "load1": 12.0,
    "memory_total_bytes": 2.0 * 2**40,
    "memory_used_bytes": 0.7 * 2**40,
    "disk_total_bytes": 7.0e12,
    "disk_used_bytes": 1.2e12,
    "net_rx_bytes": 1.0e12,
    "net_tx_bytes": 9.0e11,
}


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


def build(nodes: int, gpus: int, data_dir: Path) -> tuple[ControllerService, list[SimulatedGpus]]:
    """A service with ``nodes`` nodes, ~85 % of their GPUs held by running jobs of 4 queues
    (whole 8-GPU nodes, 2-node gangs, 1-GPU jobs) and 500 jobs pending behind them."""
    clock = _Clock(T0)
    # no store: the state is built in memory and a scrape never reads the store
    no_store = cast(Store, None)
    svc = ControllerService(no_store, Profile.build(), clock, logs=LogStore(data_dir / "logs"))
    ctrl = svc.ctrl
    for q in ("vision", "nlp", "speech", "research"):
        ctrl.queues[q] = QueueSpec(q, Resources(nodes * gpus * MILLI // 4, 10**12, 10**12))
    model = lookup("H100")
    ups = []
    for i in range(nodes):
        name = f"gpu-{i:04d}"
        ups.append(
            NodeUp(
                NodeSpec(
                    name, model.name, gpus, 224 * MILLI, 2048 * 1024, f"leaf-{i // 32}", "pod-0"
                )
            )
        )
        svc.links[name] = NodeLink(
            address=f"10.0.{i // 256}.{i % 256}", last_seen=T0, driver_version="550.54.15"
        )
    ctrl.handle(T0, *ups, schedule=False)
    shapes = [(1, gpus), (2, gpus), (1, 1), (1, 2)]
    submits = []
    target = int(nodes * gpus * 0.85)
    placed = k = 0
    while placed < target + 500 * 4:
        workers, per = shapes[k % len(shapes)]
        q = ("vision", "nlp", "speech", "research")[k % 4]
        spec = JobSpec(f"job{k}", f"user{k % 50}", q, workers=workers, gpus_per_worker=per)
        submits.append(JobSubmitted(f"j{k:06d}", spec, T0 - 3600 + k * 0.01))
        placed += workers * per
        k += 1
    out = ctrl.handle(T0, *submits)
    started = [
        TaskStarted(c.job_id, c.attempt, r)
        for c in out
        if isinstance(c, Launch)
        for r in range(len(c.allocation))
    ]
    ctrl.handle(T0 + 1, *started, schedule=False)
    sims = []
    for name, node in ctrl.nodes.items():
        sim = SimulatedGpus(model, gpus, name, start=T0)
        load = {d: 1.0 - g / MILLI for d, g in enumerate(node.gpu_free)}
        sim.set_load(load, T0 + 1)
        sims.append(sim)
    return svc, sims


def heartbeat_all(svc: ControllerService, sims: list[SimulatedGpus], now: float) -> None:
    """Every node's heartbeat replaced by a fresh sample, as agents do between two scrapes."""
    for sim in sims:
        svc.links[sim.node].metrics = metrics_payload(sim.sample(now), {}, HOST)
        svc.links[sim.node].last_seen = now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    ap.add_argument(
        "--http",
        action="store_true",
        help="also time GET /metrics over HTTP (the real router, uvicorn on 127.0.0.1)",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        svc, sims = build(a.nodes, a.gpus, Path(tmp))
        built = time.perf_counter() - t0
        coll = FleetCollector(svc)
        walls, cpus = [], []
        body = b""
        for r in range(a.repeat):
            heartbeat_all(svc, sims, T0 + 5 * (r + 1))
            svc.clock.t = T0 + 5 * (r + 1) + 1  # type: ignore[attr-defined]
            c0, w0 = time.process_time(), time.perf_counter()
            body = coll.render()
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        http: list[float] = []
        if a.http:
            http = _http_scrapes(svc, sims, a.repeat)
        if a.profile:
            prof = cProfile.Profile()
            prof.enable()
            coll.render()
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
    samples = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
    running = len(svc.ctrl.running)
    print(
        f"{a.nodes} nodes x {a.gpus} GPUs, {running} running and {svc.ctrl.pending_count} "
        f"pending jobs (state built in {built:.1f} s)\n"
        f"render: median {statistics.median(walls) * 1000:.0f} ms, worst {max(walls) * 1000:.0f} "
        f"ms, CPU median {statistics.median(cpus) * 1000:.0f} ms over {a.repeat} scrapes, each "
        f"after new heartbeats; {samples} samples, {len(body) / 1e6:.1f} MB\n"
        f"the first scrape (no label set rendered yet): {walls[0] * 1000:.0f} ms, CPU "
        f"{cpus[0] * 1000:.0f} ms"
    )
    if http:
        print(
            f"GET /metrics over HTTP: median {statistics.median(http) * 1000:.0f} ms, "
            f"worst {max(http) * 1000:.0f} ms"
        )


def _http_scrapes(svc: ControllerService, sims: list[SimulatedGpus], repeat: int) -> list[float]:
    import shutil
    import socket
    import subprocess
    import threading

    import httpx
    import uvicorn
    from fastapi import FastAPI

    from gpufleet.server.config import ServerConfig
    from gpufleet.server.routers.metrics import install

    app = FastAPI()
    install(app, svc, ServerConfig(extra={"metrics_token": "bench"}))  # behind a token
    auth = "Authorization: Bearer bench"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    out = []
    url = f"http://127.0.0.1:{port}/metrics"
    curl = shutil.which("curl")  # a client in another process, as Prometheus is
    try:
        for r in range(repeat):
            heartbeat_all(svc, sims, T0 + 100 + 5 * r)
            if curl:
                run = subprocess.run(
                    [curl, "-sf", "-H", auth, "-o", "/dev/null", "-w", "%{time_total}", url],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=True,
                )
                out.append(float(run.stdout))
            else:
                t0 = time.perf_counter()
                httpx.get(
                    url, headers={"Authorization": "Bearer bench"}, timeout=60
                ).raise_for_status()
                out.append(time.perf_counter() - t0)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    return out


if __name__ == "__main__":
    main()
