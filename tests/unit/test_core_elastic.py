"""Elastic pools in the pure core: grow for the jobs the scheduler could not place (and only
those), fail a node that does not register in time, release idle nodes, keep the min. Every
time is a number passed in; every outcome a command returned."""

from __future__ import annotations

from builders import node_spec, profile, queue, spec

from gpufleet.core.commands import NodeEvent, PowerDown, PowerUp, SetTimer, Transition
from gpufleet.core.controller import Controller
from gpufleet.core.elastic import TIMER, Power
from gpufleet.core.events import (
    JobSubmitted,
    NodeDrain,
    NodeLost,
    NodeUp,
    PowerFailed,
    TaskExited,
    TaskStarted,
    TimerFired,
)
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.elastic import ElasticPool, ElasticSpec, Provider
from gpufleet.model.job import JobState
from gpufleet.model.reason import ReasonCode
from gpufleet.model.resources import MILLI

S = JobState


def pool(n: int = 4, *, lo: int = 0, leaves: int = 1, timeout: float = 60.0) -> ElasticPool:
    nodes = tuple(
        NodeSpec(
            f"e-{i:03d}",
            "H100-SXM",
            8,
            112 * MILLI,
            1 << 20,
            f"leaf-{i * leaves // n}",
            "pod-0",
            "e",
        )
        for i in range(n)
    )
    return ElasticPool("e", ElasticSpec(lo, n, Provider("local"), timeout, 300.0, 2.0), nodes)


def controller(p: ElasticPool, fixed: int = 1, **kw: object) -> Controller:
    fixed_nodes = [node_spec(f"f-{i:03d}", 8) for i in range(fixed)]
    leaves = sorted({n.leaf for n in (*fixed_nodes, *p.nodes)})
    c = ClusterSpec(
        "t", tuple(fixed_nodes), tuple((x, "pod-0") for x in leaves), (), "", elastic=(p,)
    )
    return Controller(profile(), c, **kw)  # type: ignore[arg-type]


def ups(out: list) -> list[PowerUp]:
    return [c for c in out if isinstance(c, PowerUp)]


def downs(out: list) -> list[PowerDown]:
    return [c for c in out if isinstance(c, PowerDown)]


def submit(c: Controller, now: float, jid: str, **kw: object) -> list:
    return c.handle(now, JobSubmitted(jid, spec(jid, **kw), now))  # type: ignore[arg-type]


def test_a_job_only_new_nodes_hold_is_grown_for_in_the_same_cycle_and_starts_when_they_register():
    p = pool(4)
    c = controller(p, fixed=1)
    out = submit(c, 0.0, "big", gpus=8, workers=3)
    (up,) = ups(out)
    assert [n.name for n in up.nodes] == ["e-000", "e-001"]  # the fixed node holds one worker
    r = c.reason("big")
    assert r.code is ReasonCode.GROWING and "e-000" in r.message
    assert r.estimated_start is None  # the provider's time, which the plan does not know
    assert c.elastic.book.nodes["e-000"].power is Power.RESUMING
    # the nodes register: the job starts on them
    out = c.handle(30.0, NodeUp(p.nodes[0]), NodeUp(p.nodes[1]))
    assert any(isinstance(t, Transition) and t.new is S.STARTING for t in out)
    assert {e.what for e in out if isinstance(e, NodeEvent)} == {"powered_up"}


def test_no_growth_for_a_job_that_fits_the_nodes_up_or_waits_for_a_dependency_or_quota():
    c = controller(pool(4), fixed=1)
    assert not ups(submit(c, 0.0, "small", gpus=8))  # starts on the fixed node
    out = c.handle(1.0, JobSubmitted("dep", spec("dep", gpus=8), 1.0, (("afterok", "small"),)))
    assert not ups(out) and c.reason("dep").code is ReasonCode.DEPENDENCY
    assert c.elastic.book.in_state(Power.RESUMING) == []
    c.queues["q"] = queue("q", gpus=8)
    out = submit(c, 2.0, "capped", gpus=8, queue="q", workers=2)
    assert not ups(out)  # its queue's quota can never hold it, whatever the pool's size
    assert "queue q can never hold" in c.reason("capped").message
    c.queues["r"] = queue("r", gpus=1)
    assert len(ups(submit(c, 3.0, "r1", gpus=1, queue="r"))) == 1  # the fixed node is full
    assert not ups(submit(c, 3.0, "r2", gpus=1, queue="r"))  # r1 will take all r's quota
    assert c.reason("r2").code is not ReasonCode.GROWING


def test_a_gang_that_needs_one_leaf_gets_four_nodes_in_one_leaf_or_none():
    c = controller(pool(8, leaves=2), fixed=0)
    (up,) = ups(submit(c, 0.0, "gang", gpus=8, workers=4, topology="leaf", required=True))
    assert len({n.leaf for n in up.nodes}) == 1 and len(up.nodes) == 4
    # five whole nodes under one leaf: no leaf has five, so nothing is resumed for it
    c2 = controller(pool(8, leaves=2), fixed=0)
    out = submit(c2, 0.0, "wide", gpus=8, workers=5, topology="leaf", required=True)
    assert not ups(out)
    assert c2.reason("wide").code is not ReasonCode.GROWING


def test_a_node_that_does_not_register_in_time_fails_and_the_job_is_grown_for_elsewhere():
    p = pool(2, timeout=60.0)
    c = controller(p, fixed=0)
    (up,) = ups(submit(c, 0.0, "j", gpus=8))
    first = up.nodes[0].name
    timers = [t for t in c.handle(0.0) if isinstance(t, SetTimer)]
    assert not timers  # the deadline was set with the PowerUp (in the first step)
    out = c.handle(60.0, TimerFired(TIMER, first))
    assert [e.what for e in out if isinstance(e, NodeEvent) and e.node == first] == ["power_failed"]
    assert [d.nodes for d in downs(out)] == [(first,)]
    (again,) = ups(out)  # the same step's pass grows for it on the other node
    assert again.nodes[0].name != first
    assert c.elastic.book.nodes[first].power is Power.FAILED
    # an admin's resume lets the pool use it again
    c.handle(61.0, NodeDrain(first, False, "fixed"))
    assert c.elastic.book.nodes[first].power is Power.DOWN


def test_a_provider_failure_marks_the_node_failed():
    c = controller(pool(1), fixed=0)
    (up,) = ups(submit(c, 0.0, "j", gpus=8))
    out = c.handle(1.0, PowerFailed(up.nodes[0].name, "resume script exited 3"))
    assert any(isinstance(e, NodeEvent) and e.what == "power_failed" for e in out)
    assert c.reason("j").code is not ReasonCode.GROWING  # no node left to grow on


def test_idle_nodes_are_released_after_suspend_after_s_never_below_min():
    p = pool(3, lo=1)
    c = controller(p, fixed=0)
    out = c.handle(0.0)
    (up,) = ups(out)  # the min
    assert [n.name for n in up.nodes] == ["e-000"]
    (up,) = ups(submit(c, 1.0, "j", gpus=8, workers=2))
    assert [n.name for n in up.nodes] == ["e-001"]  # e-000, on its way, is counted
    c.handle(2.0, NodeUp(p.nodes[0]), NodeUp(p.nodes[1]))
    a = c.jobs["j"].job.attempt
    c.handle(3.0, TaskStarted("j", a, 0), TaskStarted("j", a, 1))
    out = c.handle(10.0, TaskExited("j", a, 0, 0), TaskExited("j", a, 1, 0))
    idle_timers = [t for t in out if isinstance(t, SetTimer) and t.kind == TIMER]
    assert {t.at for t in idle_timers} == {310.0}
    assert not downs(c.handle(309.0, TimerFired(TIMER, "e-001")))
    out = c.handle(310.0, TimerFired(TIMER, "e-001"))
    (down,) = downs(out)
    assert down.nodes == ("e-001",)  # e-000 stays: the min
    assert "e-001" not in c.nodes and "e-000" in c.nodes
    assert c.elastic.book.nodes["e-001"].power is Power.SUSPENDING
    # its agent's last registration is ignored while it powers down
    c.handle(311.0, NodeUp(p.nodes[1]))
    assert "e-001" not in c.nodes
    c.handle(340.0, TimerFired(TIMER, "e-001"))
    assert c.elastic.book.nodes["e-001"].power is Power.DOWN


def test_a_lost_elastic_node_requeues_its_jobs_and_powers_down():
    p = pool(1)
    c = controller(p, fixed=0)
    submit(c, 0.0, "j", gpus=8)
    c.handle(1.0, NodeUp(p.nodes[0]))
    assert c.jobs["j"].job.state is S.STARTING
    out = c.handle(5.0, NodeLost("e-000", "heartbeats stopped"))
    assert c.jobs["j"].job.state is S.PENDING  # requeued, as on any lost node
    assert "e-000" not in c.nodes
    (down,) = downs(out)
    assert down.nodes == ("e-000",) and "lost" in down.why
    (up,) = ups(out)  # the same step's pass asks for a fresh machine for the job
    assert up.nodes[0].name == "e-000"


def test_nothing_elastic_without_pools():
    c = Controller(profile(), ClusterSpec.build("t", [node_spec("a", 8)]))
    out = submit(c, 0.0, "j", gpus=8, workers=2)
    assert not ups(out) and c.reason("j").code is ReasonCode.NEVER
    assert not c.elastic.enabled
