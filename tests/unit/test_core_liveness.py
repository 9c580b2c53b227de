"""Node liveness as the core's timers (``core/liveness.py``) and the driver that runs them:
events in (renewals), decisions out (NodeLost), time passed in."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from builders import cluster_spec, profile

from gpufleet.core.commands import Command, NodeEvent
from gpufleet.core.controller import Controller
from gpufleet.core.driver import Driver, PassRule
from gpufleet.core.events import NodeLost
from gpufleet.core.liveness import NodeLiveness


def test_a_node_is_lost_once_its_grace_has_run_out() -> None:
    live = NodeLiveness(10.0)
    live.renewed("a", 100.0)
    assert live.expired(109.9) == []  # not yet
    (ev,) = live.expired(110.0)  # the grace has run out: at ``due``
    assert ev == NodeLost("a", "no heartbeat for 10 s (grace 10 s)")


@pytest.mark.parametrize(("since", "grace"), [(0.1, 0.2), (1e6, 0.1), (0.7, 0.1), (3.3, 7.7)])
def test_a_step_at_due_finds_the_loss_whatever_the_rounding(since: float, grace: float) -> None:
    # the simulator steps at ``due``: a loss missed there by a rounding (0.1 + 0.2 - 0.1 is
    # not 0.2) would have it step there forever
    live = NodeLiveness(grace)
    live.renewed("a", since)
    due = live.due()
    assert due is not None and [e.node for e in live.expired(due)] == ["a"]


def test_a_renewal_restarts_the_grace() -> None:
    live = NodeLiveness(10.0)
    live.renewed("a", 100.0)
    live.renewed("a", 108.0)
    assert live.expired(115.0) == []
    assert [e.node for e in live.expired(118.5)] == ["a"]


def test_a_lost_node_is_declared_once_until_renewed_again() -> None:
    live = NodeLiveness(5.0)
    live.renewed("a", 0.0)
    assert len(live.expired(6.0)) == 1
    assert live.expired(60.0) == [] and live.due() is None
    live.renewed("a", 70.0)  # registered again
    assert live.due() == 75.0


def test_due_is_the_first_deadline() -> None:
    live = NodeLiveness(10.0)
    assert live.due() is None
    live.renewed("a", 5.0)
    live.renewed("b", 2.0)
    assert live.due() == 12.0
    live.forget("b")
    assert live.due() == 15.0


def test_restore_undoes_a_renewal_that_did_not_count() -> None:
    live = NodeLiveness(10.0)
    live.renewed("a", 1.0)
    before = live.renewed_at("a")
    live.renewed("a", 9.0)
    live.restore("a", before)
    assert live.renewed_at("a") == 1.0
    live.restore("b", None)  # was not watched: stays so
    assert live.renewed_at("b") is None


def test_the_grace_must_be_positive() -> None:
    with pytest.raises(ValueError):
        NodeLiveness(0.0)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Command] = []

    def apply(self, commands: Sequence[Command]) -> None:
        self.sent += commands


def driver(tick_s: float | None = None) -> tuple[Driver, NodeLiveness]:
    live = NodeLiveness(10.0)
    core = Controller(profile(), cluster_spec(2, 8))  # nodes n00, n01
    rule = PassRule(tick_s=tick_s)
    return Driver(core, Recorder(), rule=rule, start=0.0, liveness=live), live


def test_the_driver_declares_the_loss_in_a_step_on_the_lease_clock() -> None:
    d, live = driver()
    names = sorted(d.core.nodes)
    for n in names:
        live.renewed(n, 1000.0)  # the lease clock: not the Clock's
    assert d.step(5.0, lease_now=1009.0).lost == []
    step = d.step(6.0, lease_now=1010.5)
    assert step.lost == names
    assert all(d.core.nodes[n].lost for n in names)
    assert [e.node for e in step.node_events if e.what == "lost"] == names


def test_with_a_tick_the_leases_are_judged_when_it_comes_round() -> None:
    """The live controller's cadence: a lease that ran out between two ticks is declared at
    the next one, so a Clock that does not move (a test's) declares nothing."""
    d, live = driver(tick_s=5.0)
    n = sorted(d.core.nodes)[0]
    live.renewed(n, 1000.0)
    assert d.step(3.0, lease_now=1011.0).lost == []  # ran out, but no tick yet
    assert d.due() == 5.0
    assert d.step(5.0, lease_now=1011.0).lost == [n]


def test_without_a_tick_the_driver_is_due_when_a_lease_runs_out() -> None:
    d, live = driver()
    n = sorted(d.core.nodes)[0]
    live.renewed(n, 7.0)  # the simulator's lease clock is its Clock
    assert d.due() == 17.0


def test_a_node_the_core_does_not_hold_up_is_only_no_longer_watched() -> None:
    d, live = driver()
    n = sorted(d.core.nodes)[0]
    d.step(1.0, [NodeLost(n, "an admin said so")])
    live.renewed(n, 0.0)
    live.renewed("ghost", 0.0)
    step = d.step(20.0)  # no lease_now: the Clock's time
    assert step.lost == [] and live.due() is None
    assert not any(isinstance(c, NodeEvent) for c in step.commands)
