"""The agent's side of fencing: it publishes each renewed lease for its watchdog, with the
fence grace the controller counts on, and acts on no launch sent under an older registration
(the controller reconciled without it and may run that job elsewhere)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.agent.agent import Agent
from gpufleet.agent.config import AgentConfig
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.agent.watchdog import WatchdogHandle, read_lease
from gpufleet.base.clock import ManualClock
from gpufleet.client.http import AgentClient

T0 = 1000.0
LEASE_S = 5.0


def cmd(kind: str, job: str, attempt: int, epoch: int = 0) -> dict[str, Any]:
    c: dict[str, Any] = {"kind": kind, "job": job, "attempt": attempt, "rank": 0, "epoch": epoch}
    if kind == "launch":
        c["command"] = [sys.executable, "-c", "import time; time.sleep(60)"]
    return c


class Controller:
    def __init__(self) -> None:
        self.on_commands: Callable[[], list[dict[str, Any]]] = list
        self.on_register: Callable[[], None] = lambda: None
        self.epoch = 6
        self.term = 0  # the leader's epoch (controllers in high availability); 0: one

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/v1/agent/")
        if path == "register":
            self.on_register()
            self.epoch += 1
            body = {"lease_s": LEASE_S, "heartbeat_s": 1.0, "fence_grace_s": 1.5}
            return httpx.Response(200, json={**body, "epoch": self.epoch, "term": self.term})
        if path.endswith("/heartbeat"):
            return httpx.Response(200, json={"lease_s": LEASE_S, "stale": []})
        if path.endswith("/commands"):
            return httpx.Response(200, json={"commands": self.on_commands()})
        return httpx.Response(204)


@pytest.fixture
def ctl() -> Controller:
    return Controller()


@pytest.fixture
def agent(ctl: Controller, tmp_path: Path) -> Iterator[Agent]:
    client = AgentClient("http://ctl", "tok", transport=httpx.MockTransport(ctl.handler))
    clock = ManualClock(T0)
    sim = SimulatedGpus.from_spec("2xH100", "n1", start=T0)
    cfg = AgentConfig(node="n1", address="10.1.2.3", data_dir=tmp_path, fence_grace_s=2.0)
    a = Agent(client, sim, cfg, clock=clock)
    a.watchdog = WatchdogHandle(tmp_path)  # not started: the test reads what it would
    yield a
    for key in a.runner.live():
        a.runner.kill(key, 0, "test over")
    a.runner.wait(5.0)


def test_each_renewal_is_published_with_the_controller_s_fence_grace(
    agent: Agent, tmp_path: Path
) -> None:
    assert agent.register_once()
    lease = read_lease(tmp_path)
    assert lease is not None and (lease.until, lease.grace_s) == (T0 + LEASE_S, 1.5)
    assert agent.state.fence_grace_s == 1.5  # the shorter of ours (2 s) and the controller's
    assert isinstance(agent.clock, ManualClock)
    agent.clock.advance(3.0)
    assert agent.heartbeat_once()
    lease = read_lease(tmp_path)
    assert lease is not None and lease.until == T0 + 3.0 + LEASE_S


def test_launches_sent_under_an_older_registration_are_dropped(
    agent: Agent, ctl: Controller
) -> None:
    assert agent.register_once()
    assert agent.epoch == 7
    # read after we woke up: the controller sent it before it declared us lost (epoch 6)
    ctl.on_commands = lambda: [cmd("launch", "j1", 2, epoch=6), cmd("kill", "j0", 1, epoch=6)]
    assert agent.commands_once(wait_s=0) == 1  # the kill only
    assert agent.runner.live() == [] and "j1" not in {k[0] for k in agent.state.tasks}
    # this registration's, a newer one's (its answer still on the way), or none said: run
    ctl.on_commands = lambda: [
        cmd("launch", "j2", 1, epoch=7),
        cmd("launch", "j3", 1, epoch=8),
        cmd("launch", "j4", 1),
    ]
    assert agent.commands_once(wait_s=0) == 3
    assert agent.runner.live() == [("j2", 1, 0), ("j3", 1, 0), ("j4", 1, 0)]


def test_a_launch_that_arrives_while_a_registration_is_in_flight_is_dropped(
    agent: Agent, ctl: Controller
) -> None:
    assert agent.register_once() and agent.epoch == 7
    seen: list[int] = []

    def meanwhile() -> None:  # the commands thread, while the registration is on its way
        ctl.on_commands = lambda: [cmd("launch", "j1", 1, epoch=7)]
        seen.append(agent.commands_once(wait_s=0))

    ctl.on_register = meanwhile
    assert agent.register_once() and agent.epoch == 8
    # not in the list of tasks the registration sent: the controller counts it lost
    assert seen == [0] and agent.runner.live() == []
    ctl.on_commands = lambda: [cmd("launch", "j1", 2, epoch=8)]
    assert agent.commands_once(wait_s=0) == 1 and agent.runner.live() == [("j1", 2, 0)]


def test_the_lease_file_is_json_the_watchdog_reads(agent: Agent, tmp_path: Path) -> None:
    agent.register_once()
    rec = json.loads((tmp_path / "lease.json").read_text())
    assert set(rec) == {"until", "grace_s", "pid", "watchdog"}  # the keepers read the last two


def test_commands_of_a_deposed_leader_are_refused_kills_too(agent: Agent, ctl: Controller) -> None:
    """Controllers in high availability (ADR 0032): every command carries the leader's epoch
    (``term``); once registered with a newer leader, the agent refuses any command of an older
    one, and its registration epochs start afresh under the new leader (another host's
    clock may be behind)."""
    ctl.epoch, ctl.term = 100, 5
    assert agent.register_once() and (agent.term, agent.epoch) == (5, 101)
    ctl.on_commands = lambda: [{**cmd("launch", "j1", 1, epoch=101), "term": 5}]
    assert agent.commands_once(wait_s=0) == 1 and agent.runner.live() == [("j1", 1, 0)]
    ctl.epoch, ctl.term = 10, 6  # a new leader, on a host whose clock is behind
    assert agent.register_once() and (agent.term, agent.epoch) == (6, 11)
    # the old leader, thawed, still hands out what it queued: refused, the kill as well
    ctl.on_commands = lambda: [
        {**cmd("kill", "j1", 1, epoch=101), "term": 5},
        {**cmd("launch", "j2", 1, epoch=101), "term": 5},
    ]
    assert agent.commands_once(wait_s=0) == 0
    assert agent.runner.live() == [("j1", 1, 0)]
    # the new leader's, under its own (lower) registration epoch: run
    ctl.on_commands = lambda: [{**cmd("launch", "j3", 1, epoch=11), "term": 6}]
    assert agent.commands_once(wait_s=0) == 1
    assert agent.runner.live() == [("j1", 1, 0), ("j3", 1, 0)]
