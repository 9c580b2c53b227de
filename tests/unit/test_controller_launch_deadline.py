"""The launch deadline: a job STARTING too long is requeued (not charged) and the nodes whose
ranks never started become suspect until their agent registers again or starts a task.
Pure core, the time a number: the timer fires when the test says so."""

from __future__ import annotations

import pytest
from builders import cluster_spec, node_spec, profile, spec

from gpufleet.core.commands import Kill, Launch, NodeEvent, SetTimer, Transition
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted, NodeUp, TaskExited, TaskStarted, TimerFired
from gpufleet.model.job import JobState

S = JobState
TIMEOUT = 60.0


def ctrl(n: int = 3, timeout: float | None = TIMEOUT) -> Controller:
    return Controller(profile(), cluster_spec(n, 8), launch_timeout_s=timeout)


def of(out: list, kind: type) -> list:
    return [c for c in out if isinstance(c, kind)]


def launch(out: list) -> Launch:
    (la,) = of(out, Launch)
    return la


def test_a_start_sets_the_launch_deadline() -> None:
    c = ctrl()
    out = c.handle(0.0, JobSubmitted("g", spec("g", gpus=8, workers=2), 0.0))
    assert SetTimer(TIMEOUT, "launch", "g", 1) in out


def test_no_deadline_without_a_timeout() -> None:
    c = ctrl(timeout=None)
    out = c.handle(0.0, JobSubmitted("g", spec("g", gpus=8, workers=2), 0.0))
    assert not [t for t in of(out, SetTimer) if t.kind == "launch"]


def test_a_rank_that_never_starts_requeues_the_gang_and_makes_its_node_suspect() -> None:
    c = ctrl()
    first = launch(c.handle(0.0, JobSubmitted("g", spec("g", gpus=8, workers=2, retries=0), 0.0)))
    c.handle(1.0, TaskStarted("g", 1, 0, first.allocation[0].node))
    silent = first.allocation[1].node
    out = c.handle(TIMEOUT, TimerFired("launch", "g", 1))
    (ev,) = of(out, NodeEvent)
    assert (ev.node, ev.what) == (silent, "suspect")
    assert "rank(s) [1] did not start within the launch deadline (60 s)" in ev.why
    # the rank that started is stopped; the silent one is told never to start
    assert Kill("g", 1, (0,), "node_lost") in out
    assert Kill("g", 1, (1,), "launch deadline passed") in out
    assert c.jobs["g"].job.state is S.STARTING  # until rank 0 has exited
    out = c.handle(TIMEOUT + 1, TaskExited("g", 1, 0, 137, "node_lost"))
    moves = [(t.old, t.new) for t in of(out, Transition)]
    assert moves[:2] == [(S.STARTING, S.NODE_LOST), (S.NODE_LOST, S.PENDING)]
    assert "not charged" in of(out, Transition)[1].why
    assert c.jobs["g"].job.retries_used == 0  # an infrastructure fault, even with no retries
    # it starts again at once, never on the suspect node
    again = launch(out)
    assert again.attempt == 2 and silent not in [p.node for p in again.allocation]
    n = c.nodes[silent]
    assert n.state == "suspect" and not n.schedulable and "launch deadline" in n.why


def test_a_single_rank_that_never_starts_is_requeued_at_once() -> None:
    c = ctrl(n=2)
    first = launch(c.handle(0.0, JobSubmitted("j", spec("j", gpus=8), 0.0)))
    out = c.handle(TIMEOUT, TimerFired("launch", "j", 1))
    moves = [(t.old, t.new) for t in of(out, Transition)]
    assert moves[:3] == [
        (S.STARTING, S.NODE_LOST),
        (S.NODE_LOST, S.PENDING),
        (S.PENDING, S.STARTING),
    ]
    assert launch(out).allocation[0].node != first.allocation[0].node
    # the suspect node's GPUs were given back: when it is trusted again, they are free
    assert c.nodes[first.allocation[0].node].gpu_free == [1000] * 8


def test_the_deadline_does_nothing_once_every_rank_started_or_for_an_old_attempt() -> None:
    c = ctrl()
    la = launch(c.handle(0.0, JobSubmitted("g", spec("g", gpus=8, workers=2), 0.0)))
    c.handle(1.0, *(TaskStarted("g", 1, r, p.node) for r, p in enumerate(la.allocation)))
    assert c.handle(TIMEOUT, TimerFired("launch", "g", 1)) == []
    assert c.handle(TIMEOUT, TimerFired("launch", "g", 0)) == []
    assert c.jobs["g"].job.state is S.RUNNING


def suspect_node(c: Controller) -> str:
    la = launch(c.handle(0.0, JobSubmitted("j", spec("j", gpus=8), 0.0)))
    c.handle(TIMEOUT, TimerFired("launch", "j", 1))
    node = la.allocation[0].node
    assert c.nodes[node].suspect
    return node


def test_a_suspect_node_is_trusted_again_when_its_agent_starts_a_task() -> None:
    c = ctrl(n=2)
    node = suspect_node(c)
    # the old attempt's start arrives late: the agent works, only slowly
    out = c.handle(TIMEOUT + 5, TaskStarted("j", 1, 0, node))
    assert NodeEvent(node, "trusted", TIMEOUT + 5, "started a task (j attempt 1)") in out
    assert c.nodes[node].schedulable and c.nodes[node].state != "suspect"


def test_a_suspect_node_is_trusted_again_when_its_agent_registers() -> None:
    c = ctrl(n=2)
    node = suspect_node(c)
    out = c.handle(TIMEOUT + 5, NodeUp(node_spec(node, 8)))
    assert NodeEvent(node, "trusted", TIMEOUT + 5, "registered again") in out
    assert c.nodes[node].schedulable


def test_a_bad_launch_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="launch timeout"):
        ctrl(timeout=0.0)
