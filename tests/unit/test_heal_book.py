"""The heal loop's state machine alone (``core/heal.py``): events in, actions out, time a
number passed in."""

from __future__ import annotations

from gpufleet.core.heal import (
    BURN_IN,
    REMEDIATE,
    HealBook,
    HealNote,
    HealOver,
    HealStep,
    cause_of,
    from_history,
    rma_reason,
    span,
)
from gpufleet.model.heal import HealPolicy

XID79 = "failed its health checks: GPU 0: XID 79 (GPU has fallen off the bus)"
DAY = 86_400.0


def book(**kw: object) -> HealBook:
    return HealBook(HealPolicy(**kw))  # type: ignore[arg-type]


def of(actions: list, kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


def heal_once(b: HealBook, node: str, now: float) -> list:
    """A full passing round from a fault: what the last report returned."""
    b.fault(node, XID79, now)
    (step,) = of(b.ready(node, now + 1, peer="n2"), HealStep)
    (burn,) = of(b.report(node, step.round, REMEDIATE, True, "reset", now + 2, "n2"), HealStep)
    return b.report(node, burn.round, BURN_IN, True, "", now + 3)


def test_a_fault_waits_then_remediates_burns_in_and_returns_the_node() -> None:
    b = book(step_timeout_s=600.0)
    assert b.fault("n1", XID79, 10.0) == []  # the drain is the history's; nothing to say yet
    assert b.healing("n1") and b.waiting() == ["n1"]
    out = b.ready("n1", 11.0, peer="n2")
    assert out == [
        HealNote("n1", "remediating", "remediating: GPU reset (round 1)"),
        HealStep("n1", 1, REMEDIATE, 611.0, "n2"),
    ]
    assert b.phase("n1") == "remediating" and b.waiting() == []
    out = b.report("n1", 1, REMEDIATE, True, "GPU 0 reset", 12.0, "n2")
    (note,) = of(out, HealNote)
    assert note.what == "burning in" and "network with n2" in note.why
    assert "after GPU 0 reset" in note.why
    assert of(out, HealStep) == [HealStep("n1", 1, BURN_IN, 612.0, "n2")]
    out = b.report("n1", 1, BURN_IN, True, "60 s at full load", 72.0)
    assert of(out, HealOver) == [HealOver("n1", True, out[-1].why)]
    assert out[0].what == "healed" and "60 s at full load" in out[0].why
    assert not b.healing("n1")
    assert b.failures("n1") == [(10.0, "XID 79")]  # kept: the window counts it


def test_remedy_none_goes_straight_to_the_burn_in() -> None:
    b = book(remedy="none")
    b.fault("n1", XID79, 0.0)
    (step,) = of(b.ready("n1", 1.0), HealStep)
    assert step.step == BURN_IN and b.phase("n1") == "burning in"


def test_a_failed_burn_in_counts_and_the_next_round_starts() -> None:
    b = book()
    b.fault("n1", XID79, 0.0)
    b.ready("n1", 1.0)
    b.report("n1", 1, REMEDIATE, True, "", 2.0)
    out = b.report("n1", 1, BURN_IN, False, "GPU 0: XID 79 (GPU has fallen off the bus)", 3.0)
    assert out == [
        HealNote("n1", "heal failed", "burn-in failed: GPU 0: XID 79 (GPU has fallen off the bus)")
    ]
    assert b.waiting() == ["n1"] and b.failures("n1") == [(0.0, "XID 79"), (3.0, "XID 79")]
    (step,) = of(b.ready("n1", 4.0), HealStep)
    assert step.round == 2


def test_the_nth_failure_within_the_window_gives_the_node_up() -> None:
    b = book(max_failures=3, window_s=DAY)
    b.fault("n1", XID79, 0.0)
    for r, t in ((1, 10.0), (2, 20.0)):
        b.ready("n1", t)
        b.report("n1", r, REMEDIATE, True, "", t + 1)
        out = b.report("n1", r, BURN_IN, False, "GPU 0: XID 79 (fell off)", t + 2)
    verdict = "3 XID 79 in 24 h: suspected hardware — RMA"
    assert out[-2:] == [HealNote("n1", "rma", verdict), HealOver("n1", False, verdict)]
    assert b.phase("n1") == "rma" and b.waiting() == [] and b.healing("n1")
    assert b.ready("n1", 30.0) == [] and b.fault("n1", XID79, 31.0) == []


def test_three_faults_that_each_healed_are_still_three_in_the_window() -> None:
    b = book(max_failures=3, window_s=DAY)
    assert of(heal_once(b, "n1", 0.0), HealOver)[0].ok
    assert of(heal_once(b, "n1", 3600.0), HealOver)[0].ok
    out = b.fault("n1", XID79, 7200.0)
    assert out[-1] == HealOver("n1", False, "3 XID 79 in 24 h: suspected hardware — RMA")


def test_failures_older_than_the_window_do_not_count() -> None:
    b = book(max_failures=2, window_s=3600.0)
    heal_once(b, "n1", 0.0)
    out = heal_once(b, "n1", 3601.0)  # the first fell out of the hour
    assert of(out, HealOver) == [HealOver("n1", True, out[-1].why)]
    assert b.failures("n1") == [(3601.0, "XID 79")]
    assert of(b.fault("n1", XID79, 3700.0), HealOver)[0].why.startswith("2 XID 79 in 1 h")


def test_an_unanswered_step_fails_at_its_deadline_and_a_late_answer_is_stale() -> None:
    b = book(step_timeout_s=60.0)
    b.fault("n1", XID79, 0.0)
    (step,) = of(b.ready("n1", 1.0), HealStep)
    assert b.timed_out("n1", step.round, 61.0) == [
        HealNote("n1", "heal failed", "remediation failed: no answer within 60 s")
    ]
    assert b.failures("n1")[-1] == (61.0, "remediation timed out")
    assert b.report("n1", 1, REMEDIATE, True, "", 62.0) == []  # too late: waiting now
    b.ready("n1", 62.0)  # round 2
    assert b.report("n1", 1, REMEDIATE, True, "", 63.0) == []  # round 1's, stale
    assert b.timed_out("n1", 1, 64.0) == []
    assert b.phase("n1") == "remediating"


def test_a_node_lost_mid_round_voids_it() -> None:
    b = book()
    b.fault("n1", XID79, 0.0)
    b.ready("n1", 1.0)
    b.interrupted("n1")
    assert b.waiting() == ["n1"]
    assert b.report("n1", 1, REMEDIATE, True, "", 2.0) == []  # the void round's answer
    (step,) = of(b.ready("n1", 3.0), HealStep)
    assert step.round == 3 and len(b.failures("n1")) == 1  # a loss is not a failure


def test_an_admin_takes_over_and_a_resume_after_rma_forgets_the_failures() -> None:
    b = book(max_failures=1)
    b.fault("n1", XID79, 0.0)
    assert b.phase("n1") == "rma"
    b.cleared("n1", resumed=True)  # the GPU was replaced
    assert not b.healing("n1") and b.failures("n1") == []
    b2 = book()
    b2.fault("n1", XID79, 0.0)
    b2.cleared("n1", resumed=False)  # an admin's own drain: the loop lets go
    assert not b2.healing("n1") and b2.failures("n1") == [(0.0, "XID 79")]


def test_a_restored_node_waits_for_its_agent_before_its_next_round() -> None:
    b = book()
    b.restore("n1", "burning in", [(5.0, "XID 79")], 4)
    assert b.healing("n1") and b.waiting() == [] and b.ready("n1", 6.0) == []
    b.heard("n1")
    assert b.waiting() == ["n1"]
    assert b.report("n1", 4, BURN_IN, True, "", 6.5) == []  # round 4 was the old process's
    (step,) = of(b.ready("n1", 7.0), HealStep)
    assert step.step == REMEDIATE and step.round == 5
    b.restore("n2", "rma", [])
    assert b.phase("n2") == "rma"


def test_the_causes_and_the_verdict_in_words() -> None:
    assert cause_of(XID79) == "XID 79"
    assert cause_of("GPU 1: 2 double-bit ECC errors") == "double-bit ECC errors"
    assert cause_of("GPU 2 missing (fell off the bus?)") == "GPU missing"
    assert cause_of("GPU 1: 95 °C over the 90 °C limit") == "overheating"
    assert cause_of("stress: compute failed", "burn-in") == "burn-in failed"
    assert span(DAY) == "24 h" and span(3 * DAY) == "3 d" and span(90 * 60) == "90 min"
    assert span(45) == "45 s"
    assert rma_reason(["XID 79", "burn-in failed", "XID 79"], DAY) == (
        "3 failures (2 XID 79, 1 burn-in failed) in 24 h: suspected hardware — RMA"
    )


def test_the_loop_is_read_back_from_the_node_s_history() -> None:
    drain = "failed its health checks"
    h = [
        (1.0, "drained", f"{drain}: GPU 0: XID 79 (GPU has fallen off the bus)"),
        (2.0, "remediating", "remediating: GPU reset (round 1)"),
        (3.0, "burning in", "burning in: device …"),
        (4.0, "heal failed", "burn-in failed: under stress: GPU 0: XID 79 (…)"),
        (5.0, "remediating", "remediating: GPU reset (round 2)"),
    ]
    assert from_history(h, drain) == ("remediating", [(1.0, "XID 79"), (4.0, "XID 79")], 2)
    done = [*h, (6.0, "burning in", "…"), (7.0, "healed", "…"), (7.0, "resumed", "…")]
    assert from_history(done, drain)[0] == ""
    rma = [*h, (6.0, "heal failed", "remediation failed: no answer within 9 s"), (6.0, "rma", "…")]
    phase, failures, _ = from_history(rma, drain)
    assert phase == "rma" and failures[-1] == (6.0, "remediation failed")
    assert from_history([*rma, (8.0, "resumed", "GPU replaced")], drain)[:2] == ("", [])
    disk = [(1.0, "drained", f"{drain}: disk full on /var/lib/gpufleet")]
    assert from_history(disk, drain) == ("", [], 0)  # not a GPU's fault: not the loop's
