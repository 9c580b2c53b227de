"""The agent's I/O steps against a fake controller behind ``httpx.MockTransport``: no threads,
a ManualClock for the lease, real subprocesses for the tasks."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.agent.agent import Agent
from gpufleet.agent.config import AgentConfig
from gpufleet.agent.probes import free_port, tcp_probe
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.base.clock import ManualClock
from gpufleet.client.http import AgentClient
from gpufleet.model.service import Probe
from support.waiting import wait_for

PY = sys.executable
T0 = 1000.0


class FakeController:
    """The agent endpoints of /api/v1, in memory; ``down`` makes every request fail."""

    def __init__(self, lease_s: float = 5.0) -> None:
        self.lease_s = lease_s
        self.down = False
        self.registered: dict[str, dict[str, Any]] = {}
        self.registrations: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.logs: dict[tuple[str, int, int, str], str] = {}
        self.final: set[tuple[str, int, int, str]] = set()
        self.out_at_exit: dict[str, str] = {}  # a job's stdout as it stood when its exit came
        self.stale: list[dict[str, Any]] = []
        self.foreign_jobs: set[str] = set()  # logs for these: 403, not this node's rank
        self.rejoining: set[str] = set()  # rebuilt from its store: asks these to register again
        self.refuse_registrations = False  # its store takes no writes: 503
        self.requests = 0
        self.hold: threading.Event | None = None  # set: a long-poll waits until it is set
        self.polls_held = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.down:
            raise httpx.ConnectError("controller unreachable", request=request)
        path = request.url.path.removeprefix("/api/v1/agent/")
        body = json.loads(request.content) if request.content else None
        if path == "register" and self.refuse_registrations:
            return httpx.Response(503, json={"detail": "database or disk is full"})
        if path == "register":
            self.rejoining.discard(body["node"])
            self.registered[body["node"]] = body
            self.registrations.append(body)
            return httpx.Response(200, json={"lease_s": self.lease_s, "heartbeat_s": 1.0})
        node, _, what = path.partition("/")
        if node not in self.registered:
            return httpx.Response(409, json={"detail": f"node {node} is not registered"})
        if what == "heartbeat":
            self.heartbeats.append(body)
            again = node in self.rejoining
            return httpx.Response(
                200, json={"lease_s": self.lease_s, "stale": self.stale, "register_again": again}
            )
        if what == "commands":
            if self.hold is not None:
                self.polls_held += 1
                self.hold.wait(30)
            out, self.commands = self.commands, []
            return httpx.Response(200, json={"commands": out})
        if what == "events":
            self.events += body["events"]
            for e in body["events"]:
                if e["kind"] == "exited":
                    key = (e["job"], e["attempt"], e["rank"], "stdout")
                    self.out_at_exit[e["job"]] = self.logs.get(key, "")
            return httpx.Response(200)
        if what == "logs" and body["job"] in self.foreign_jobs:
            return httpx.Response(403, json={"detail": "node n1 does not run rank 0"})
        if what == "logs":
            key = (body["job"], body["attempt"], body["rank"], body["stream"])
            have = self.logs.get(key, "")
            assert body["offset"] == len(have.encode()), "log chunk offset must continue the text"
            self.logs[key] = have + body["data"]
            if body["final"]:
                self.final.add(key)
            return httpx.Response(200)
        return httpx.Response(404, json={"detail": path})

    def launch(self, code: str, job: str = "j1", rank: int = 0, **kw: Any) -> None:
        self.commands.append(
            {
                "kind": "launch",
                "job": job,
                "attempt": 0,
                "rank": rank,
                "command": [PY, "-c", code],
                **kw,
            }
        )

    def kinds(self) -> list[tuple[str, str]]:
        return [(e["kind"], e["job"]) for e in self.events]


@pytest.fixture
def ctl() -> FakeController:
    return FakeController()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def sim() -> SimulatedGpus:
    return SimulatedGpus.from_spec("4xH100", "n1", start=T0)


@pytest.fixture
def agent(
    ctl: FakeController, clock: ManualClock, sim: SimulatedGpus, tmp_path: Path
) -> Iterator[Agent]:
    client = AgentClient("http://ctl", "tok", transport=httpx.MockTransport(ctl.handler))
    cfg = AgentConfig(
        node="n1", address="10.1.2.3", data_dir=tmp_path, labels={"rack": "r1"}, fence_grace_s=0.5
    )
    a = Agent(client, sim, cfg, clock=clock)
    yield a
    for key in a.runner.live():
        a.runner.kill(key, 0, "test over")
    a.runner.wait(5.0)


def until(agent: Agent, pred: Callable[[], bool], timeout: float = 10.0) -> None:
    """Tick (real processes need real time to exit) until ``pred``; bounded."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        agent.tick_once()
        time.sleep(0.01)


SLEEP = "import time; print('up', flush=True); time.sleep(60)"


def test_register_describes_the_node(agent: Agent, ctl: FakeController) -> None:
    assert agent.register_once()
    reg = ctl.registered["n1"]
    assert (reg["address"], reg["gpu_model"], len(reg["gpus"])) == ("10.1.2.3", "H100-SXM", 4)
    assert reg["labels"] == {"rack": "r1"} and reg["driver_version"] == "550.54.15"
    assert reg["cpu_cores"] >= 1 and reg["memory_gib"] > 0
    assert agent.state.registered and agent.state.lease_until == T0 + 5.0
    assert agent.heartbeat_s == 1.0  # the controller asked for a shorter period


def test_a_launch_runs_and_its_events_and_logs_reach_the_controller(
    agent: Agent, ctl: FakeController
) -> None:
    agent.register_once()
    ctl.launch("import os; print(os.environ['CUDA_VISIBLE_DEVICES'])", gpus=[1, 3])
    assert agent.commands_once(wait_s=0) == 1
    until(agent, lambda: not agent.runner.live())
    assert agent.ship_once()
    assert ctl.kinds() == [("started", "j1"), ("exited", "j1")]
    assert ctl.events[1]["exit_code"] == 0
    assert ctl.logs[("j1", 0, 0, "stdout")] == "1,3\n"
    assert ctl.final == {("j1", 0, 0, "stdout"), ("j1", 0, 0, "stderr")}
    assert agent.logs.pending() == []
    # its output came before its exit, as slurmstepd's: a job seen ended has its whole log
    assert ctl.out_at_exit == {"j1": "1,3\n"}


def test_heartbeat_carries_health_metrics_and_running_tasks(
    agent: Agent, ctl: FakeController, sim: SimulatedGpus, clock: ManualClock
) -> None:
    sim.inject("xid79@gpu2:1s")
    agent.register_once()
    ctl.launch(SLEEP, gpus=[0])
    agent.commands_once(wait_s=0)
    clock.advance(2.0)
    agent.tick_once()  # the runner tells the simulated GPUs which are busy
    assert agent.heartbeat_once()
    hb = ctl.heartbeats[-1]
    assert hb["health"]["healthy"] is False and hb["health"]["bad_gpus"] == [2]
    assert "XID 79" in hb["health"]["why"]
    assert hb["running"] == [{"job": "j1", "attempt": 0, "rank": 0}]
    util = [g["values"]["DCGM_FI_DEV_GPU_UTIL"] for g in hb["metrics"]["gpus"]]
    assert util == [100.0, 0.0, 0.0, 0.0]
    assert "memory_total_bytes" in hb["metrics"]["host"]


def test_tasks_the_controller_calls_stale_are_stopped(agent: Agent, ctl: FakeController) -> None:
    agent.register_once()
    ctl.launch(SLEEP)
    agent.commands_once(wait_s=0)
    ctl.stale = [{"job": "j1", "attempt": 0, "rank": 0}]
    agent.heartbeat_once()
    until(agent, lambda: not agent.runner.live())
    agent.ship_once()
    assert ctl.events[-1]["kind"] == "exited" and "stale" in ctl.events[-1]["why"]


def test_lease_expiry_fences_tasks_and_reports_them_on_reconnect(
    agent: Agent, ctl: FakeController, clock: ManualClock
) -> None:
    agent.register_once()  # lease until T0 + 5
    ctl.launch(SLEEP)
    agent.commands_once(wait_s=0)
    agent.tick_once()
    ctl.down = True
    clock.advance(3.0)
    assert not agent.heartbeat_once()
    agent.tick_once()
    assert agent.runner.live()  # within the lease: keeps running
    clock.advance(2.0)
    agent.tick_once()  # lease over: SIGTERM
    until(agent, lambda: not agent.runner.live())
    assert agent.state.fenced
    assert not agent.ship_once()  # still unreachable: kept for later
    ctl.down = False
    assert agent.ship_once()
    exited = ctl.events[-1]
    assert exited["kind"] == "exited" and exited["exit_code"] == 143
    assert "fenced" in exited["why"] and "lease expired" in exited["why"]
    assert agent.heartbeat_once() and not agent.state.fenced


def test_a_controller_that_forgot_the_node_gets_a_new_registration(
    agent: Agent, ctl: FakeController
) -> None:
    agent.register_once()
    ctl.launch(SLEEP)
    agent.commands_once(wait_s=0)
    del ctl.registered["n1"]  # e.g. declared lost
    assert agent.heartbeat_once()
    assert len(ctl.registrations) == 2
    assert ctl.registrations[-1]["running"] == [{"job": "j1", "attempt": 0, "rank": 0}]


def test_a_rebuilt_controller_that_cannot_store_the_registration_keeps_the_lease(
    agent: Agent, ctl: FakeController, clock: ManualClock
) -> None:
    """The controller rebuilt its state from the store and asks for a registration that its
    store cannot take yet: the heartbeats it answers keep the lease, nothing is fenced, and
    the registration that finally goes through lists the task."""
    agent.register_once()  # lease until T0 + 5
    ctl.launch(SLEEP)
    agent.commands_once(wait_s=0)
    agent.tick_once()
    ctl.rejoining.add("n1")
    ctl.refuse_registrations = True
    for _ in range(4):  # 12 s: more than twice the lease, a heartbeat every 3 s
        clock.advance(3.0)
        assert agent.heartbeat_once()  # answered: the lease goes on
        agent.tick_once()
        assert agent.runner.live() and not agent.state.fenced
    assert len(ctl.registrations) == 1  # every try at registering again was refused
    ctl.refuse_registrations = False
    clock.advance(3.0)
    assert agent.heartbeat_once()
    assert len(ctl.registrations) == 2 and "n1" not in ctl.rejoining
    assert ctl.registrations[-1]["running"] == [{"job": "j1", "attempt": 0, "rank": 0}]
    assert agent.runner.live() and not any(e["kind"] == "exited" for e in ctl.events)


def test_a_frozen_node_says_nothing(
    agent: Agent, ctl: FakeController, sim: SimulatedGpus, clock: ManualClock
) -> None:
    sim.inject("freeze:10s")
    agent.register_once()
    clock.advance(11.0)
    before = ctl.requests
    assert not agent.heartbeat_once()
    assert agent.commands_once(wait_s=0) == 0
    assert not agent.ship_once()
    assert ctl.requests == before


def test_stop_kills_tasks_and_delivers_their_exit(agent: Agent, ctl: FakeController) -> None:
    agent.register_once()
    ctl.launch(SLEEP)
    agent.commands_once(wait_s=0)
    out, _ = agent.runner.log_paths(("j1", 0, 0))
    until(agent, lambda: out.exists() and out.read_bytes() == b"up\n")
    agent.stop(grace_s=2.0, flush_s=2.0)
    assert ctl.kinds() == [("started", "j1"), ("exited", "j1")]
    assert "shutting down" in ctl.events[-1]["why"]
    assert ("j1", 0, 0, "stdout") in ctl.final and ctl.logs[("j1", 0, 0, "stdout")] == "up\n"


def test_a_launch_a_poll_brings_once_the_agent_stops_is_not_run(
    agent: Agent, ctl: FakeController
) -> None:
    """A long-poll in flight when the agent stops: what it brings is not acted on (and not
    acknowledged: the controller hands it out again), so no task starts after the kill."""
    agent.register_once()
    ctl.hold = threading.Event()
    brought: list[int] = []
    poll = threading.Thread(target=lambda: brought.append(agent.commands_once(wait_s=0)))
    poll.start()
    wait_for("the poll in flight", lambda: ctl.polls_held == 1)
    agent.stop(grace_s=1.0, flush_s=1.0)
    ctl.launch(SLEEP)
    ctl.hold.set()
    poll.join(timeout=30)
    assert brought == [0]
    assert agent.runner.live() == [] and ctl.kinds() == []


def test_logs_the_controller_refuses_do_not_hold_up_the_others(
    agent: Agent, ctl: FakeController
) -> None:
    agent.register_once()
    ctl.foreign_jobs = {"gone"}
    ctl.launch("print('lost')", job="gone")
    ctl.launch("print('kept')", job="kept")
    agent.commands_once(wait_s=0)
    until(agent, lambda: not agent.runner.live())
    assert agent.ship_once()
    assert ctl.logs[("kept", 0, 0, "stdout")] == "kept\n"
    assert not any(k[0] == "gone" for k in ctl.logs)
    assert agent.logs.pending() == []


def test_the_agents_threads_survive_an_answer_they_cannot_parse(
    agent: Agent, ctl: FakeController
) -> None:
    """A malformed command batch (or any other surprise) fails one step of a loop, never the
    thread: the next launch on this node still runs."""
    real = ctl.handler
    bad = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/commands") and bad["n"] < 2:
            bad["n"] += 1  # a body the agent's schema refuses: pydantic raises, not httpx
            return httpx.Response(200, json={"commands": [{"kind": "launch", "job": 7}]})
        return real(request)

    ctl.handler = handler  # type: ignore[method-assign]
    agent.client = AgentClient("http://ctl", "tok", transport=httpx.MockTransport(handler))
    assert agent.register_once()
    agent.start()
    try:
        end = time.monotonic() + 10
        while bad["n"] < 2 and time.monotonic() < end:
            time.sleep(0.01)
        assert bad["n"] == 2
        ctl.launch("print('still here')", job="after")
        until(agent, lambda: ("exited", "after") in ctl.kinds(), timeout=20)
    finally:
        agent.stop(kill_tasks=True, grace_s=0.5, flush_s=0.5)
    assert ("started", "after") in ctl.kinds()


def test_a_launch_that_raises_fails_that_task_and_the_agent_goes_on(
    agent: Agent, ctl: FakeController, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = agent.runner.launch

    def launch(cmd: Any, now: float | None = None) -> Any:
        if cmd.job == "doomed":  # a failure the runner did not foresee
            raise RuntimeError("disk on fire")
        return real(cmd, now)

    monkeypatch.setattr(agent.runner, "launch", launch)
    assert agent.register_once()
    ctl.launch("pass", job="doomed")
    ctl.launch("pass", job="fine")
    agent.commands_once(wait_s=0)
    until(agent, lambda: agent.ship_once() and ("exited", "fine") in ctl.kinds())
    doomed = next(e for e in ctl.events if e["job"] == "doomed")
    assert (doomed["kind"], doomed["exit_code"]) == ("exited", 125)
    assert "RuntimeError: disk on fire" in doomed["why"]
    assert agent.state.tasks == {}  # nothing left "launching" forever


REPLICA = r"""
import http.server, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # ready while the test's file exists
        self.send_response(200 if os.path.exists(sys.argv[1]) else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"""


def test_a_replicas_probes_start_when_it_runs_report_changes_and_stop_when_it_ends(
    agent: Agent, ctl: FakeController, clock: ManualClock, tmp_path: Path
) -> None:
    """A launch with a port and probes: the task listens on $PORT; the first probe waits for
    its initial delay on the agent's clock; each verdict change goes to the controller as a
    ``probe`` event on the event channel, once; a dead replica is probed no more; the exit
    stops its probes."""
    agent.config.address = "127.0.0.1"  # where the probes reach the replica
    ctl.lease_s = 1e6  # the clock jumps by probe periods: no fencing meanwhile
    ready, alive = tmp_path / "ready", tmp_path / "alive"
    ready.touch()
    alive.touch()
    port = free_port("127.0.0.1")
    readiness = Probe("http", "/ready", initial_delay_s=2, period_s=1, failure_threshold=1)
    liveness = Probe(
        "command", command=("test", "-e", str(alive)), initial_delay_s=2, failure_threshold=2
    )
    agent.register_once()
    ctl.commands.append(
        {
            "kind": "launch",
            "job": "web.1",
            "attempt": 1,
            "rank": 0,
            "command": [PY, "-c", REPLICA, str(ready)],
            "env": {"PORT": str(port)},
            "probes": {"readiness": readiness.to_dict(), "liveness": liveness.to_dict()},
        }
    )
    agent.commands_once(wait_s=0)
    agent.tick_once()
    key = ("web.1", 1, 0)
    assert key in agent.probes
    deadline = time.monotonic() + 10
    while tcp_probe("127.0.0.1", port, 0.2)[0] is False:  # the real process comes up
        assert time.monotonic() < deadline, "the replica never listened on its $PORT"
        time.sleep(0.02)

    def probe_events() -> list[tuple[str, bool, str]]:
        agent.ship_once()
        return [(e["probe"], e["ok"], e["why"]) for e in ctl.events if e["kind"] == "probe"]

    clock.advance(1.9)
    agent.tick_once()
    assert agent.probe_executor.pending == 0 and probe_events() == []  # not before the delay
    clock.advance(0.1)
    until(agent, lambda: bool(probe_events()))
    assert probe_events() == [("readiness", True, "ready: HTTP 200")]  # liveness: no news

    ready.unlink()
    clock.advance(10.0)  # both due again
    until(agent, lambda: len(probe_events()) == 2)
    assert probe_events()[1] == ("readiness", False, "not ready: 1 failures in a row: HTTP 503")

    alive.unlink()
    for _ in range(2):  # two failures in a row: dead, said once
        clock.advance(10.0)
        until(agent, lambda: agent.probe_executor.pending == 0)
        agent.tick_once()
    until(agent, lambda: any(p == "liveness" for p, _, _ in probe_events()))
    dead = [e for e in probe_events() if e[0] == "liveness"]
    assert dead == [("liveness", False, "liveness probe failed 2 times in a row: exit 1")]
    assert [e["rank"] for e in ctl.events if e["kind"] == "probe"] == [0, 0, 0]

    ctl.commands.append({"kind": "kill", "job": "web.1", "attempt": 1, "rank": 0, "why": "dead"})
    agent.commands_once(wait_s=0)
    until(agent, lambda: not agent.runner.live())
    assert key not in agent.probes
    agent.ship_once()
    assert ctl.kinds()[-1] == ("exited", "web.1")


def test_a_launch_with_bad_probes_is_refused_with_the_reason(
    agent: Agent, ctl: FakeController
) -> None:
    agent.register_once()
    ctl.launch(SLEEP, probes={"readiness": {"http": {"path": "no-slash"}}})
    agent.commands_once(wait_s=0)
    agent.ship_once()
    assert agent.runner.live() == []
    (ev,) = ctl.events
    assert ev["kind"] == "exited" and "probes.readiness.http.path" in ev["why"]
