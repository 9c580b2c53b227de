"""The agent's side of the heal loop (``agent/heal.py``) against the in-memory controller of
the agent tests and simulated GPUs: a reset clears what it should and the XIDs before it, a
recurring fault fails the burn-in under stress, a redelivered order runs once, and the site's
remedy is not this step's. Each step runs on the worker's thread; its answer is read from the
agent's event queue."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_agent_agent import T0, FakeController

from gpufleet.agent.agent import Agent
from gpufleet.agent.config import AgentConfig
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.base.clock import ManualClock
from gpufleet.client.http import AgentClient
from support.waiting import wait_for


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[tuple[Agent, FakeController, SimulatedGpus, ManualClock]]:
    ctl, clock = FakeController(), ManualClock(T0)
    sim = SimulatedGpus.from_spec("4xH100", "n1", start=T0)
    client = AgentClient("http://ctl", "tok", transport=httpx.MockTransport(ctl.handler))
    a = Agent(
        client, sim, AgentConfig(node="n1", address="10.1.2.3", data_dir=tmp_path), clock=clock
    )
    assert a.register_once()
    yield a, ctl, sim, clock
    a.healer.close()


def order(ctl: FakeController, step: str, round_: int = 1, **kw: Any) -> None:
    ctl.commands.append(
        {"kind": "heal", "job": "heal", "attempt": round_, "rank": 0, "step": step,
         "remedy": "reset", "epoch": 7, **kw}
    )  # fmt: skip


def answers(a: Agent, n: int = 1) -> list[tuple[str, bool, str]]:
    def got() -> list[Any] | None:
        evs = [e for e in a.events.peek(100) if e.kind == "heal"]
        return evs if len(evs) >= n else None

    return [(e.step, e.ok, e.why) for e in wait_for("the heal answers", got, 60)]


def test_a_reset_clears_the_fault_and_the_xids_seen_before(parts: Any) -> None:
    a, ctl, sim, clock = parts
    sim.inject("xid79@gpu0")
    clock.advance(1)
    assert not a.health.check(sim.sample(clock.now())).healthy
    order(ctl, "remediate")
    a.commands_once(0)
    assert answers(a) == [("remediate", True, "GPU reset of 4 simulated GPUs")]
    clock.advance(1)
    assert a.health.check(sim.sample(clock.now())).healthy


def test_a_recurring_fault_fails_the_burn_in_under_stress(parts: Any) -> None:
    a, ctl, sim, clock = parts
    sim.inject("xid79@gpu0+1h")  # hardware: back after every reset within the hour
    clock.advance(1)
    sim.sample(clock.now())
    order(ctl, "remediate")
    order(ctl, "burn-in", burn_in_s=0)
    a.commands_once(0)
    (_, (step, ok, why)) = answers(a, 2)
    assert (step, ok) == ("burn-in", False)
    assert why.startswith("under stress: GPU 0: XID 79"), why


def test_a_redelivered_order_runs_once_and_a_site_command_is_not_this_step(parts: Any) -> None:
    a, ctl, _, _ = parts
    order(ctl, "remediate", remedy="command", command=["/bin/true"])
    order(ctl, "remediate", remedy="command", command=["/bin/true"])  # the outbox again
    order(ctl, "remediate", round_=2)  # the steps run in order: a repeat would come before it
    a.commands_once(0)
    assert answers(a, 2) == [
        ("remediate", False, "the site's command is run as a node command, not as this step"),
        ("remediate", True, "GPU reset of 4 simulated GPUs"),
    ]
    assert [e.attempt for e in a.events.peek(100) if e.kind == "heal"] == [1, 2]
