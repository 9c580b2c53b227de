"""The heal loop inside the pure Controller: a GPU fault drains the node, the loop orders a
remediation once the node runs nothing, then a burn-in, and only its pass returns the node; the
Nth failure leaves it drained with the verdict as its reason."""

from __future__ import annotations

from builders import cluster_spec, profile, spec

from gpufleet.core.commands import HealOrder, NodeEvent, SetTimer
from gpufleet.core.controller import HEALTH_DRAIN, Controller
from gpufleet.core.events import (
    JobSubmitted,
    NodeDrain,
    NodeHealReport,
    NodeHealth,
    NodeLost,
    NodeRegistered,
    NodeUp,
    TaskExited,
    TaskStarted,
    TimerFired,
)
from gpufleet.core.healing import HEAL_RESUME, HEAL_TIMER
from gpufleet.model.heal import HealPolicy

WHY = "GPU 0: XID 79 (GPU has fallen off the bus)"


def ctrl(**kw: object) -> Controller:
    policy = HealPolicy(**{"burn_in_s": 5.0, "step_timeout_s": 100.0, **kw})  # type: ignore[arg-type]
    return Controller(profile(), cluster_spec(3, 8), heal=policy)


def orders(out: list) -> list[HealOrder]:
    return [c for c in out if isinstance(c, HealOrder)]


def events(out: list, node: str = "n00") -> list[tuple[str, str]]:
    return [(c.what, c.why) for c in out if isinstance(c, NodeEvent) and c.node == node]


def test_an_idle_node_is_remediated_burnt_in_and_returned() -> None:
    c = ctrl()
    out = c.handle(1.0, NodeHealth("n00", False, WHY, (0,)))
    assert ("drained", f"{HEALTH_DRAIN}: {WHY}") in events(out)
    assert orders(out) == [HealOrder("n00", 1, "remediate", "reset", (), 5.0, "n01", 100.0)]
    assert SetTimer(101.0, HEAL_TIMER, "n00", 1) in out
    n = c.nodes["n00"]
    assert n.drained and n.why == "remediating: GPU reset (round 1)"
    # the reset cleared the XID: the agent reports healthy, which does not return the node
    out = c.handle(2.0, NodeHealth("n00", True))
    assert n.drained and n.healthy and n.why.startswith("remediating")
    assert ("resumed", HEAL_RESUME) not in events(out)
    out = c.handle(3.0, NodeHealReport("n00", 1, "remediate", True, "GPU 0 reset"))
    assert orders(out) == [HealOrder("n00", 1, "burn-in", "reset", (), 5.0, "n01", 100.0)]
    assert n.why.startswith("burning in: device, network with n01")
    out = c.handle(9.0, NodeHealReport("n00", 1, "burn-in", True, "5 s at full load"))
    assert events(out) == [
        ("healed", "passed its burn-in (round 1): 5 s at full load"),
        ("resumed", HEAL_RESUME),
    ]
    assert not n.drained and n.schedulable and n.why == HEAL_RESUME
    # and it takes work again
    out = c.handle(10.0, JobSubmitted("j", spec("j", gpus=8, workers=3), 10.0))
    assert c.jobs["j"].job.state.value == "STARTING"


def test_a_burn_in_passed_before_the_agents_healthy_report_returns_a_healthy_node() -> None:
    # the agent's next health report may come a heartbeat after its burn-in's: "resumed" means
    # schedulable at once, not "unhealthy" until then
    c = ctrl()
    c.handle(1.0, NodeHealth("n00", False, WHY, (0,)))
    c.handle(3.0, NodeHealReport("n00", 1, "remediate", True, "GPU 0 reset"))
    out = c.handle(9.0, NodeHealReport("n00", 1, "burn-in", True, "5 s at full load"))
    assert ("resumed", HEAL_RESUME) in events(out)
    n = c.nodes["n00"]
    assert n.healthy and not n.bad_gpus and n.schedulable and n.state == "idle"
    # the report, when it comes, changes nothing, not even the node's reason
    assert events(c.handle(10.0, NodeHealth("n00", True))) == []
    assert n.state == "idle" and n.why == HEAL_RESUME


def test_the_round_waits_for_the_jobs_on_the_node_to_end() -> None:
    c = ctrl()
    c.handle(0.0, JobSubmitted("a", spec("a", gpus=4), 0.0))
    node = c.jobs["a"].allocation[0].node
    c.handle(1.0, TaskStarted("a", 1, 0))
    gpus = c.jobs["a"].allocation[0].gpus
    bad = next(g for g in range(8) if g not in gpus)  # a fault on another GPU: "a" runs on
    out = c.handle(2.0, NodeHealth(node, False, WHY, (bad,)))
    assert orders(out) == [] and c.nodes[node].drained
    out = c.handle(3.0, TaskExited("a", 1, 0, 0))
    assert [o.step for o in orders(out)] == ["remediate"]


def test_three_failures_leave_the_node_drained_with_the_verdict() -> None:
    c = ctrl(max_failures=3, window_s=86_400.0)
    c.handle(1.0, NodeHealth("n00", False, WHY, (0,)))
    for r, t in ((1, 10.0), (2, 20.0)):
        c.handle(t, NodeHealReport("n00", r, "remediate", True, ""))
        out = c.handle(t + 1, NodeHealReport("n00", r, "burn-in", False, WHY))
    verdict = "3 XID 79 in 24 h: suspected hardware — RMA"
    assert ("heal failed", f"burn-in failed: {WHY}") in events(out)
    assert ("rma", verdict) in events(out) and orders(out) == []
    n = c.nodes["n00"]
    assert n.drained and n.why == verdict
    # healthy reports (an agent restarted) do not bring it back; an admin's resume does
    c.handle(30.0, NodeHealth("n00", True))
    assert n.drained and n.why == verdict
    c.handle(31.0, NodeDrain("n00", False, "GPU 0 replaced"))
    assert not n.drained and c.healer.book is not None
    assert c.healer.book.failures("n00") == []


def test_a_step_that_never_answers_fails_at_its_timer() -> None:
    c = ctrl(max_failures=2)
    c.handle(1.0, NodeHealth("n00", False, WHY, (0,)))
    out = c.handle(101.0, TimerFired(HEAL_TIMER, "n00", 1))
    assert ("heal failed", "remediation failed: no answer within 100 s") in events(out)
    assert c.nodes["n00"].why.startswith("2 failures (1 XID 79, 1 remediation timed out)")


def test_a_node_lost_mid_round_is_healed_from_the_start_when_it_is_back() -> None:
    c = ctrl()
    c.handle(1.0, NodeHealth("n00", False, WHY, (0,)))
    c.handle(5.0, NodeLost("n00"))
    spec_ = c.nodes["n00"].spec
    out = c.handle(6.0, NodeUp(spec_, True))
    n = c.nodes["n00"]
    assert n.drained and n.health_drained  # back, but not in service until proven
    assert [(o.round, o.step) for o in orders(out)] == [(3, "remediate")]


def test_without_a_policy_a_node_returns_when_its_checks_pass() -> None:
    c = Controller(profile(), cluster_spec(2, 8))
    out = c.handle(1.0, NodeHealth("n00", False, WHY, (0,)))
    assert orders(out) == []
    out = c.handle(2.0, NodeHealth("n00", True))
    assert ("resumed", "passed its health checks again") in events(out)


def test_a_full_disk_is_no_gpu_fault_and_starts_no_heal() -> None:
    c = ctrl()
    out = c.handle(1.0, NodeHealth("n00", False, "disk full on /x", jobs_unaffected=True))
    assert orders(out) == [] and not c.healer.holds("n00")
    out = c.handle(2.0, NodeHealth("n00", True))
    assert ("resumed", "passed its health checks again") in events(out)


def test_a_restored_loop_starts_again_once_the_agent_is_back() -> None:
    c = ctrl()
    c.hold_restored_node("n00", "burning in: …", drained=True, health_drained=True)
    c.restore_heal("n00", "burning in", [(0.5, "XID 79")])
    assert orders(c.handle(1.0)) == []  # its agent has not registered yet
    out = c.handle(2.0, NodeUp(c.nodes["n00"].spec, True))
    assert [o.step for o in orders(out)] == ["remediate"]


def test_the_site_s_command_is_one_shell_line_for_the_node() -> None:
    from gpufleet.server.service.healremedy import command_line

    line = HealOrder("n3", 1, "remediate", "command", ("/bin/sh", "-c", "ipmi {node} cycle"))
    assert command_line(line) == "ipmi n3 cycle"
    argv = HealOrder("n3", 1, "remediate", "command", ("/opt/fix", "--node", "{node}", "a b"))
    assert command_line(argv) == "/opt/fix --node n3 'a b'"


def test_an_agent_that_registers_again_mid_round_gets_a_new_round() -> None:
    # a restarted agent forgot the step it was given: the round is void at once, not failed
    # at its deadline
    c = ctrl()
    c.handle(1.0, NodeHealth("n00", False, WHY, (0,)))
    out = c.handle(2.0, NodeRegistered(c.nodes["n00"].spec))
    assert [(o.round, o.step) for o in orders(out)] == [(3, "remediate")]
    assert c.healer.book is not None and c.healer.book.failures("n00") == [(1.0, "XID 79")]
    assert orders(c.handle(3.0, NodeHealReport("n00", 1, "remediate", True, ""))) == []  # stale
