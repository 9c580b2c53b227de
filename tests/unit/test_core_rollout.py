"""Rolling maintenance's pure state machine (core/rollout.py): events in, actions out, the time
given with each event. Batches, the canary and its confirmation or soak, the drain deadline, a
failed batch stopping the rollout with its nodes drained and rolled back, the window, the agent
upgrade, and a rollout read back from its document carrying on without a second command."""

from __future__ import annotations

from typing import Any

from gpufleet.core.rollout import (
    ACTIVE,
    CANCELLED,
    CONFIRM,
    SOAKING,
    STOPPED,
    SUCCEEDED,
    WAITING,
    Action,
    Cancel,
    CommandEnded,
    Confirmed,
    Drain,
    NodeIdle,
    Record,
    Requeue,
    Resume,
    Resumed,
    Rollout,
    RolloutSpec,
    RunCommand,
    Started,
    Tick,
)

NODES = tuple(f"n{i}" for i in range(6))


def spec(**kw: Any) -> RolloutSpec:
    base: dict[str, Any] = {"id": "m-1", "nodes": NODES, "batch": 2, "run": "upgrade.sh"}
    return RolloutSpec(**{**base, **kw})


def drains(acts: list[Action]) -> list[str]:
    return [a.node for a in acts if isinstance(a, Drain)]


def commands(acts: list[Action]) -> list[tuple[str, str]]:
    return [(a.node, a.step) for a in acts if isinstance(a, RunCommand)]


def through(r: Rollout, nodes: tuple[str, ...], now: float, ok: bool = True) -> list[Action]:
    """Each node idle, then its command ended ``ok``; the actions of it all."""
    out: list[Action] = []
    for n in nodes:
        out += r.handle(NodeIdle(n), now)
    for n in nodes:
        out += r.handle(CommandEnded(n, "run", ok, "" if ok else "exit 3"), now)
    return out


def test_batches_go_one_after_another_each_node_drained_run_and_resumed() -> None:
    r = Rollout(spec())
    acts = r.handle(Started(), 0.0)
    assert drains(acts) == ["n0", "n1"] and r.state == ACTIVE
    assert r.handle(Tick(), 1.0) == []  # nothing until they run nothing
    acts = r.handle(NodeIdle("n0"), 2.0)
    assert commands(acts) == [("n0", "run")]
    (cmd,) = [a for a in acts if isinstance(a, RunCommand)]
    assert (cmd.id, cmd.kind, cmd.command) == ("m-1.0.run", "exec", "upgrade.sh")
    acts = r.handle(CommandEnded("n0", "run", True), 3.0)
    assert [a.node for a in acts if isinstance(a, Resume)] == ["n0"]
    assert drains(acts) == []  # n1 still busy: the batch has not settled
    acts = r.handle(NodeIdle("n1"), 4.0) + r.handle(CommandEnded("n1", "run", True), 5.0)
    assert drains(acts) == ["n2", "n3"]
    acts = through(r, ("n2", "n3"), 6.0)
    assert drains(acts) == ["n4", "n5"]
    acts = through(r, ("n4", "n5"), 7.0)
    assert r.state == SUCCEEDED and r.ended == 7.0
    assert any(isinstance(a, Record) and "done" in a.why for a in acts)


def test_a_failed_batch_stops_the_rollout_leaves_its_node_drained_and_rolls_it_back() -> None:
    r = Rollout(spec(rollback="downgrade.sh"))
    r.handle(Started(), 0.0)
    r.handle(NodeIdle("n0"), 1.0)
    r.handle(NodeIdle("n1"), 1.0)
    acts = r.handle(CommandEnded("n0", "run", False, "exit 3"), 2.0)
    assert ("n0", "rollback") in commands(acts)
    (d,) = [a for a in acts if isinstance(a, Drain)]
    assert d.node == "n0" and "run failed: exit 3" in d.why  # drained with the reason
    assert not [a for a in acts if isinstance(a, Resume)]
    r.handle(CommandEnded("n1", "run", True), 3.0)
    acts = r.handle(CommandEnded("n0", "rollback", True), 4.0)
    assert r.state == STOPPED and "1 node(s) failed" in r.why
    assert drains(acts) == []  # no next batch
    assert r.nodes["n0"].phase == "rolled back" and r.nodes["n2"].phase == "pending"


def test_max_failures_lets_the_rollout_go_on_past_that_many() -> None:
    r = Rollout(spec(max_failures=1))
    r.handle(Started(), 0.0)
    acts = through(r, ("n0",), 1.0, ok=False) + through(r, ("n1",), 1.0)
    assert drains(acts)[-2:] == ["n2", "n3"] and r.state == ACTIVE
    through(r, ("n2",), 2.0, ok=False)
    through(r, ("n3",), 2.0)
    assert r.state == STOPPED


def test_the_canary_waits_for_a_confirmation_then_the_rest_follow() -> None:
    r = Rollout(spec(canary=1))
    assert drains(r.handle(Started(), 0.0)) == ["n0"]
    acts = through(r, ("n0",), 1.0)
    assert r.state == CONFIRM and drains(acts) == []
    assert r.handle(Tick(), 1000.0) == []
    acts = r.handle(Confirmed("admin"), 1001.0)
    assert drains(acts) == ["n1", "n2"] and r.state == ACTIVE


def test_the_canary_soaks_for_its_time_then_the_rest_follow() -> None:
    r = Rollout(spec(canary=2, soak_s=60.0))
    r.handle(Started(), 0.0)
    through(r, ("n0", "n1"), 10.0)
    assert r.state == SOAKING and r.soak_until == 70.0
    assert drains(r.handle(Tick(), 69.0)) == []
    assert drains(r.handle(Tick(), 70.0)) == ["n2", "n3"]


def test_past_the_deadline_a_draining_nodes_jobs_are_requeued_once() -> None:
    r = Rollout(spec(deadline_s=100.0))
    r.handle(Started(), 0.0)
    assert r.handle(Tick(), 99.0) == []
    acts = r.handle(Tick(), 100.0)
    assert [a.node for a in acts if isinstance(a, Requeue)] == ["n0", "n1"]
    assert not [a for a in r.handle(Tick(), 200.0) if isinstance(a, Requeue)]
    assert commands(r.handle(NodeIdle("n0"), 201.0)) == [("n0", "run")]


def test_validation_runs_after_the_command_and_a_failed_one_fails_the_node() -> None:
    r = Rollout(spec(validate=("device", "storage")))
    r.handle(Started(), 0.0)
    r.handle(NodeIdle("n0"), 1.0)
    acts = r.handle(CommandEnded("n0", "run", True), 2.0)
    (v,) = [a for a in acts if isinstance(a, RunCommand)]
    assert (v.kind, v.command, v.id) == ("validate", "--layers device,storage", "m-1.0.validate")
    assert not [a for a in acts if isinstance(a, Resume)]
    acts = r.handle(CommandEnded("n0", "validate", False, "gpus seen: FAIL"), 3.0)
    assert drains(acts) == ["n0"] and r.nodes["n0"].phase == "failed"


def test_a_window_holds_the_batches_until_it_opens_and_stops_them_once_it_closes() -> None:
    r = Rollout(spec(window=(100.0, 200.0), window_name="maint"))
    assert drains(r.handle(Started(), 0.0)) == [] and r.state == WAITING
    assert drains(r.handle(Tick(), 100.0)) == ["n0", "n1"]
    through(r, ("n0", "n1"), 150.0)
    assert r.nodes["n2"].phase == "draining"
    through(r, ("n2", "n3"), 250.0)  # a batch under way finishes
    assert r.state == STOPPED and "window maint closed" in r.why
    assert r.nodes["n4"].phase == "pending"


def test_an_agent_upgrade_restarts_agents_batch_by_batch_without_draining() -> None:
    r = Rollout(spec(agent_upgrade=True, run="", python="/opt/new/bin/python"))
    acts = r.handle(Started(), 0.0)
    assert drains(acts) == [] and commands(acts) == [("n0", "restart"), ("n1", "restart")]
    (c, _) = [a for a in acts if isinstance(a, RunCommand)]
    assert (c.kind, c.command) == ("restart", "/opt/new/bin/python")
    r.handle(CommandEnded("n0", "restart", True), 1.0)
    acts = r.handle(CommandEnded("n1", "restart", True), 1.0)
    assert commands(acts) == [("n2", "restart"), ("n3", "restart")]
    assert not [a for a in acts if isinstance(a, Resume)]  # never drained


def test_read_back_from_its_document_it_asks_again_for_the_same_steps_by_the_same_ids() -> None:
    r = Rollout(spec(validate=("device",)))
    r.handle(Started(), 0.0)
    first = r.handle(NodeIdle("n0"), 1.0)
    again = Rollout.from_dict(r.to_dict())
    assert again.to_dict() == r.to_dict()
    acts = again.handle(Resumed(), 5.0)
    run = [a for a in acts if isinstance(a, RunCommand)]
    assert run == [a for a in first if isinstance(a, RunCommand)]  # same id: no second run
    assert drains(acts) == ["n1"]
    assert again.handle(NodeIdle("n0"), 6.0) == []  # past draining: nothing twice


def test_a_repeated_or_stale_report_changes_nothing_and_cancel_ends_it() -> None:
    r = Rollout(spec())
    r.handle(Started(), 0.0)
    r.handle(NodeIdle("n0"), 1.0)
    assert r.handle(CommandEnded("n0", "validate", True), 2.0) == []
    r.handle(CommandEnded("n0", "run", True), 2.0)
    assert r.handle(CommandEnded("n0", "run", False), 3.0) == []
    r.handle(Cancel("admin"), 4.0)
    assert r.state == CANCELLED and r.handle(NodeIdle("n1"), 5.0) == []
