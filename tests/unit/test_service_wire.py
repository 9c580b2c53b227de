"""A service's data path in one process, with the server's own parts around the core: the
driver with the agents' executor and the gateway executor (the built-in proxy, real), replica
processes started from the launches the agents would get, and the agents' probe reports turned
into core events as the server turns them. A replica failing liveness leaves the routes first,
its Kill waits for the drain, and it is replaced after the back-off."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from builders import cluster_spec, profile

from gpufleet.agent.probes import probes_of, tcp_probe
from gpufleet.api import schemas as s
from gpufleet.core.controller import Controller
from gpufleet.core.driver import Driver
from gpufleet.core.events import ServiceCreated, TaskExited, TaskStarted
from gpufleet.gateway import make_gateway
from gpufleet.model.job import JobSpec
from gpufleet.model.service import Backoff, Probe, ServiceSpec
from gpufleet.ops.http_backends import Client, free_port
from gpufleet.ops.localcluster import free_replica_ports, release_ports
from gpufleet.server.agent_executor import AgentExecutor
from gpufleet.server.endpoints import EndpointBook
from gpufleet.server.gateway_executor import ServiceGateway, WithGateway
from gpufleet.server.outbox import Outbox
from gpufleet.server.service import task_event

REPLICA = r"""
import http.server, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = sys.argv[1].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer((sys.argv[2], int(os.environ["PORT"])), H).serve_forever()
"""


@dataclass
class Link:
    address: str
    epoch: int = 1


@pytest.fixture
def procs() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    running: dict[str, subprocess.Popen[bytes]] = {}
    yield running
    for p in running.values():
        p.kill()
        p.wait()


@pytest.fixture
def replica_ports() -> Iterator[str]:
    block = free_replica_ports()
    yield block
    release_ports(block)


def test_launch_probes_routes_and_a_liveness_failure_end_to_end(
    tmp_path: Path, procs: dict[str, subprocess.Popen[bytes]], replica_ports: str
) -> None:
    # replica ports of this test's own (--replica-ports): a live cluster's replicas on this host
    # take theirs from the default range
    first, last = map(int, replica_ports.split("-"))
    ctrl = Controller(profile(), cluster_spec(2, 8), replica_ports=range(first, last + 1))
    nodes = sorted(ctrl.nodes)
    # two nodes on one machine: each its own loopback address (replicas on two nodes may
    # get the same port)
    links = {n: Link(f"127.0.0.{i + 1}") for i, n in enumerate(nodes)}
    outbox = Outbox()
    later: list[tuple[float, Callable[[], None]]] = []
    hops: queue.Queue[Callable[[], None]] = queue.Queue()  # back on the "loop": this thread
    gw = ServiceGateway(
        make_gateway("builtin"), EndpointBook(tmp_path / "ep.json", free_port(), 1), links
    )
    agents = AgentExecutor(ctrl, outbox, links, grace_kill_s=1.0)
    driver = Driver(ctrl, WithGateway(agents, gw, lambda d, f: later.append((d, f)), hops.put))
    readiness = Probe("http", "/ready", period_s=1)
    liveness = Probe("tcp", failure_threshold=2)
    tmpl = JobSpec("web", "alice", gpus_per_worker=1, command=("serve",), exclude=())
    spec = ServiceSpec("web", tmpl, 0, 2, None, readiness, liveness, restart=Backoff(10, 10))
    try:
        driver.step(0.0, [ServiceCreated(spec)])
        by_job: dict[str, tuple[str, s.AgentCommand]] = {
            c.job: (n, c) for n in nodes for c in outbox._queues[n] if c.kind == "launch"
        }
        assert sorted(by_job) == ["web.1", "web.2"]
        ports = {}
        for job, (node, c) in by_job.items():
            # what the agent gets: $PORT (free among its node's replicas) and the model's own
            # probes, which it reads back whole
            ports[job] = int(c.env["PORT"])
            assert probes_of(c.probes) == [("readiness", readiness), ("liveness", liveness)]
            env = {**os.environ, "PORT": c.env["PORT"]}
            procs[job] = subprocess.Popen(
                [sys.executable, "-c", REPLICA, job, links[node].address], env=env
            )
        assert set(ports.values()) <= {first, first + 1}
        for job, (node, _) in by_job.items():
            deadline = time.monotonic() + 10
            while not tcp_probe(links[node].address, ports[job], 0.2)[0]:
                assert time.monotonic() < deadline, f"{job} never listened"
                time.sleep(0.02)

        def report(node: str, **ev: object) -> object:
            """What an agent's event becomes on the server (routers/agent.py → task_event)."""
            return task_event(node, s.AgentEvent.model_validate(ev))

        started = [TaskStarted(j, c.attempt, 0, n) for j, (n, c) in by_job.items()]
        driver.step(1.0, started)
        gw.applied.result(30)
        # the endpoint exists from the creation on, with no backend until one is ready
        assert gw.started and gw.routes["web"] == ()
        or_ready = [
            report(n, kind="probe", job=j, attempt=c.attempt, rank=0, probe="readiness", ok=True)
            for j, (n, c) in by_job.items()
        ]
        driver.step(2.0, or_ready)  # type: ignore[arg-type]
        gw.applied.result(30)
        e = gw.endpoint("web")
        assert e is not None
        client = Client(e.port, e.token)
        seen = {client.get(fresh=True)[1] for _ in range(8)}
        assert seen == {b"web.1", b"web.2"}

        # web.1 fails liveness: out of the routes at once, killed after the drain, replaced
        n1, c1 = by_job["web.1"]
        dead = report(
            n1, kind="probe", job="web.1", attempt=c1.attempt, rank=0, probe="liveness",
            why="liveness probe failed 2 times in a row: connect refused",
        )  # fmt: skip
        driver.step(3.0, [dead])  # type: ignore[list-item]
        gw.applied.result(30)
        assert {client.get(fresh=True)[1] for _ in range(6)} == {b"web.2"}
        assert procs["web.1"].poll() is None  # still running: draining
        assert not [c for c in outbox._queues[n1] if c.kind == "kill"]
        hops.get(timeout=30)()  # the apply is done: the drain begins
        ((delay, kill),) = later
        assert delay == 2.0
        kill()
        (k,) = [c for c in outbox._queues[n1] if c.kind == "kill"]
        assert (k.job, k.attempt, k.rank) == ("web.1", c1.attempt, 0)
        procs["web.1"].kill()
        driver.step(4.0, [TaskExited("web.1", c1.attempt, 0, -9, "killed")])
        assert "web.3" not in ctrl.jobs  # the back-off (10 s) first
        driver.step(14.0)
        assert "web.3" in ctrl.jobs
        relaunch = [c for n in nodes for c in outbox._queues[n] if c.job == "web.3"]
        assert [c.kind for c in relaunch] == ["launch"] and relaunch[0].env["PORT"]
        if client.conn is not None:
            client.conn.close()
    finally:
        gw.stop()
