"""The idle-GPU governor in the pure core: utilization samples in (with the time a test skips
ahead), warnings and actions out. The policy's YAML form is read here too."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster_spec, queue, spec
from test_controller import Harness, of

from gpufleet.core.commands import IdleNotice, Kill, Transition
from gpufleet.core.events import GpuUtilization, JobSubmitted, QueueChanged
from gpufleet.model.errors import SpecError
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.job import JobState
from gpufleet.model.queue import QueueSpec

S = JobState
MIN = 60.0


def running(policy: IdlePolicy | None, exempt_s: float = 0.0) -> Harness:
    h = Harness(cluster_spec(1, 8))
    h(0.0, QueueChanged(replace(queue("default"), idle=policy)))
    h(0.0, JobSubmitted("j", replace(spec("j", gpus=2), idle_exempt_s=exempt_s), 0.0))
    h.start_all(1.0, "j")
    assert h.state("j") is S.RUNNING
    return h


def sample(h: Harness, t: float, *utils: float) -> list:
    return h(t, GpuUtilization((("j", h.attempt("j"), utils),)))


def warnings(out: list) -> list[str]:
    return [c.why for c in of(out, Transition) if c.old is S.RUNNING and c.new is S.RUNNING]


def test_princeton_defaults_warn_at_60_and_105_minutes_and_cancel_at_120() -> None:
    h = running(IdlePolicy())
    log: list = []
    for minute in range(0, 125, 5):  # a sample every 5 minutes, both GPUs at 0 %
        log += [(minute, c) for c in sample(h, 10.0 + minute * MIN, 0.0, 0.0)]
    warned = [(m, c.why) for m, c in log if isinstance(c, Transition) and c.new is S.RUNNING]
    assert [m for m, _ in warned] == [60, 105]
    assert "warning 1" in warned[0][1] and "cancelled at 120 min" in warned[0][1]
    kills = [(m, c) for m, c in log if isinstance(c, Kill)]
    assert [m for m, _ in kills] == [120]
    notices = [c for _, c in log if isinstance(c, IdleNotice)]
    assert [(n.stage, n.n) for n in notices] == [("warn", 1), ("warn", 2), ("cancel", 3)]
    assert notices[0].user == "alice" and notices[0].queue == "default"
    end = h.exit_killed(10.0 + 121 * MIN, [kills[0][1]])
    cancelled = [c for c in of(end, Transition) if c.new is S.CANCELLED]
    assert cancelled and cancelled[0].why.startswith("cancelled: idle GPUs")


def test_a_busy_sample_in_the_window_keeps_the_job_from_idling() -> None:
    pol = IdlePolicy(warn_after_s=(60.0,), act_after_s=120.0, window_s=30.0)
    h = running(pol)
    out = []
    for t in range(0, 200, 10):  # busy every third sample: the 30 s mean never reaches 0
        out += sample(h, 10.0 + t, 90.0 if t % 30 == 0 else 0.0, 0.0)
    assert not warnings(out) and not of(out, Kill)
    assert h.c.idle.idle_seconds()["j"] == 0.0


def test_busy_again_starts_the_clock_and_the_warnings_over() -> None:
    pol = IdlePolicy(warn_after_s=(60.0,), act_after_s=120.0, window_s=0.0)
    h = running(pol)
    out = sample(h, 10.0, 0.0, 0.0) + sample(h, 80.0, 0.0, 0.0)
    assert len(warnings(out)) == 1
    sample(h, 100.0, 50.0, 50.0)  # busy: forgiven
    out = sample(h, 110.0, 0.0, 0.0) + sample(h, 200.0, 0.0, 0.0)
    assert len(warnings(out)) == 1 and not of(out, Kill)  # 90 s idle since 110: warned only
    assert h.c.idle.idle_seconds()["j"] == 90.0


def test_requeue_action_requeues_as_a_preemption() -> None:
    pol = IdlePolicy(warn_after_s=(), act_after_s=60.0, action="requeue", window_s=0.0)
    h = running(pol)
    out = sample(h, 10.0, 0.0, 0.0) + sample(h, 70.0, 0.0, 0.0)
    kills = of(out, Kill)
    assert len(kills) == 1
    h.exit_killed(71.0, kills)
    assert h.state("j") in (S.PENDING, S.STARTING)  # requeued (and maybe placed again)
    assert h.c.jobs["j"].job.retries_used == 0


def test_warn_only_policy_warns_at_the_action_time_and_does_nothing_else() -> None:
    pol = IdlePolicy(warn_after_s=(), act_after_s=60.0, action="warn", window_s=0.0)
    h = running(pol)
    out = sample(h, 10.0, 0.0) + sample(h, 70.0, 0.0) + sample(h, 500.0, 0.0)
    assert len(warnings(out)) == 1 and "only warns" in warnings(out)[0]
    assert not of(out, Kill) and h.state("j") is S.RUNNING


def test_exempt_queue_and_job_flag_up_to_the_queues_limit() -> None:
    h = running(IdlePolicy(exempt=True, act_after_s=60.0, warn_after_s=(), window_s=0.0))
    out = sample(h, 10.0, 0.0) + sample(h, 10_000.0, 0.0)
    assert not of(out, Kill) and not of(out, IdleNotice)

    pol = IdlePolicy(warn_after_s=(30.0,), act_after_s=60.0, window_s=0.0, exempt_max_s=100.0)
    h = running(pol, exempt_s=10_000.0)  # asks far more than the queue grants
    out = sample(h, 10.0, 0.0) + sample(h, 50.0, 0.0)
    assert "spared 2 min" in warnings(out)[0]
    assert not of(sample(h, 169.0, 0.0), Kill)  # 159 s idle < 60 + 100
    assert of(sample(h, 170.0, 0.0), Kill)


def test_the_job_s_own_word_is_not_asked_a_queue_without_policy_is_left_alone() -> None:
    h = running(None)
    out = sample(h, 10.0, 0.0) + sample(h, 100_000.0, 0.0)
    assert not of(out, Kill) and h.c.idle.watched == {}


def test_a_stale_attempt_s_samples_are_ignored() -> None:
    h = running(IdlePolicy(warn_after_s=(), act_after_s=60.0, window_s=0.0))
    out = h(10.0, GpuUtilization((("j", 99, (0.0,)),)))
    out += h(100.0, GpuUtilization((("j", 99, (0.0,)),)))
    assert not of(out, Kill)


def test_policy_from_yaml_with_durations_and_clear_errors() -> None:
    q = QueueSpec.from_dict(
        {"name": "gpu", "idle": {"warn_after": ["60m", "105m"], "act_after": "2h"}},
        source="q.yaml",
        path="queues[0]",
    )
    assert q.idle == IdlePolicy()
    assert QueueSpec.from_dict({"name": "gpu", "idle": {}}, source="q", path="").idle == (
        IdlePolicy()
    )
    pol = IdlePolicy.from_dict(
        {"threshold_pct": 10, "action": "requeue", "exempt_max": "30m", "window_s": 60},
        source="q",
        path="idle",
    )
    assert (pol.threshold_pct, pol.action, pol.exempt_max_s) == (10.0, "requeue", 1800.0)
    assert IdlePolicy.from_dict(pol.to_dict(), source="store", path="") == pol
    for bad, where in [
        ({"action": "kill"}, "idle.action"),
        ({"warn_after": ["3h"]}, "idle.warn_after"),
        ({"act_after": "soon"}, "idle.act_after"),
        ({"act_after": 0}, "idle.act_after"),
        ({"threshold": 5}, "idle"),
    ]:
        with pytest.raises(SpecError) as e:
            IdlePolicy.from_dict(bad, source="q", path="idle")
        assert where in str(e.value)


def test_a_queue_s_policy_survives_the_store() -> None:
    from gpufleet.server.store.codec import queue_from_dict, queue_to_dict

    q = replace(queue("gpu"), idle=IdlePolicy(action="requeue", exempt_max_s=60.0))
    assert queue_from_dict(queue_to_dict(q)) == q
    assert queue_from_dict(queue_to_dict(queue("cpu"))).idle is None


def test_charge_idle_counts_idle_gpu_time_against_the_queue_s_fair_share() -> None:
    def usage(charge: float) -> float:
        pol = IdlePolicy(warn_after_s=(), act_after_s=3600.0, window_s=0.0, charge_idle=charge)
        h = running(pol)
        for t in (10.0, 70.0, 130.0):
            sample(h, t, 0.0, 0.0)
        return h.c.ledger.values["default"]

    # 2 GPUs of the cluster's 8, idle from 10 to 130 s, charged once more: 120 · 2/8 share·s
    # (less the little it decays meanwhile: a 7-day half-life)
    assert usage(1.0) - usage(0.0) == pytest.approx(30.0, rel=1e-3)
    assert usage(2.0) - usage(0.0) == pytest.approx(60.0, rel=1e-3)


def test_a_warned_running_job_has_a_reason_that_says_the_warning_until_it_is_busy() -> None:
    """The user sees it in ``gpufleet show`` (the API's Reason of a RUNNING job): code
    IdleGpus, said afresh at each sample (its GPUs, their utilization, how long idle, when it
    was warned and when the policy acts); gone once its GPUs are busy again."""
    from gpufleet.model.reason import ReasonCode

    pol = IdlePolicy(warn_after_s=(60.0,), act_after_s=180.0, window_s=0.0)
    h = running(pol)
    sample(h, 10.0, 0.0, 0.0)
    assert h.c.idle.reason("j") is None  # idle 0 s: not warned yet
    sample(h, 80.0, 0.0, 0.4)
    r = h.c.idle.reason("j")
    assert r is not None and r.code is ReasonCode.IDLE
    assert r.message == (
        "idle: its 2 GPUs at 0.2 % for 1 min; warned at 1 min, cancelled at 3 min "
        "(queue default's idle policy)"
    )
    assert r.data == {
        "idle_s": 70.0,
        "gpus": 2,
        "util_pct": 0.2,
        "warnings": 1,
        "act_at_s": 180.0,
        "action": "cancel",
        "queue": "default",
    }
    sample(h, 130.0, 0.0, 0.0)  # still idle: the Reason counts on, the warning stands
    r = h.c.idle.reason("j")
    assert r is not None and "at 0 % for 2 min; warned at 1 min," in r.message
    assert r.data["idle_s"] == 120.0
    sample(h, 140.0, 50.0, 50.0)  # busy: the warning no longer stands
    assert h.c.idle.reason("j") is None


def test_an_idle_reason_says_a_warn_only_policy_and_a_job_s_spared_time() -> None:
    pol = IdlePolicy(warn_after_s=(60.0,), act_after_s=120.0, window_s=0.0, action="warn")
    h = running(pol, exempt_s=60.0)
    for t in (10.0, 80.0):
        sample(h, t, 0.0, 0.0)
    r = h.c.idle.reason("j")
    assert r is not None and r.message == (
        "idle: its 2 GPUs at 0 % for 1 min; warned at 1 min, warned again at 3 min (the "
        "policy only warns), spared 1 min on its request (queue default's idle policy)"
    )
