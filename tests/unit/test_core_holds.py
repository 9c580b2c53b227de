"""Held jobs in the pure core (ADR 0074): Slurm's sbatch -H and scontrol hold/uhold/release.
A held job stays PENDING with JobHeldUser or JobHeldAdmin, is never started nor estimated,
and once released starts in its place by arrival; the hold is a transition to the state the
job is in, so that the store keeps it (the router's rules: tests/integration/test_holds_api.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster_spec, spec
from test_controller import Harness, moves, of

from gpufleet.core.commands import Launch, Signal, Transition
from gpufleet.core.controller import ControllerError
from gpufleet.core.events import JobCancelled, JobHold, JobSignal, JobSubmitted, TimerFired
from gpufleet.model.job import JobState
from gpufleet.model.reason import ReasonCode

S = JobState


def started(out: list) -> list[str]:
    return [c.job_id for c in of(out, Launch)]


def test_a_job_submitted_held_waits_for_its_release_then_starts() -> None:
    h = Harness(cluster_spec(1, 8))
    out = h(0.0, JobSubmitted("a", replace(spec("a", gpus=8), hold=True), 0.0))
    assert started(out) == [] and h.c.jobs["a"].job.held == "user"
    r = h.c.reason("a")
    assert r.code is ReasonCode.HELD_USER and r.code.value == "JobHeldUser"
    assert r.estimated_start is None
    assert started(h(5.0, TimerFired("tick", "", 0))) == []  # an idle cluster: still held
    out = h(9.0, JobHold("a", "", "released by alice"))
    assert moves(out, "a")[0] == (S.PENDING, S.PENDING)  # the release, kept by the store
    assert started(out) == ["a"] and h.c.jobs["a"].job.held == ""


def test_a_released_job_keeps_its_place_before_those_submitted_after_it() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "run", gpus=8)
    h.start_all(1.0, "run")
    h.submit(2.0, "first", gpus=8)
    h.submit(3.0, "second", gpus=8)
    out = h(4.0, JobHold("first", "admin", "held by root"))
    assert [t.why for t in of(out, Transition)] == ["held by root"]
    assert h.c.reason("first").code is ReasonCode.HELD_ADMIN
    h(5.0, JobHold("first", "", "released by root"))
    out = h.exit(6.0, "run", 0)
    assert started(out) == ["first"]  # in its place, not behind "second"


def test_a_held_job_is_passed_over_and_one_behind_it_starts() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "a", gpus=8)
    h.submit(0.0, "b", gpus=8)  # one pass each: "a" started
    h.submit(1.0, "c", gpus=8)
    h(2.0, JobHold("b", "user", "held by alice"))
    out = h.exit(3.0, "a", 0)
    assert started(out) == ["c"] and h.state("b") is S.PENDING


def test_the_same_hold_again_and_an_ended_job_change_nothing() -> None:
    h = Harness(cluster_spec(1, 8))
    h(0.0, JobSubmitted("a", replace(spec("a", gpus=8), hold=True), 0.0))
    assert h(1.0, JobHold("a", "user", "held by alice")) == []
    h(2.0, JobCancelled("a"))
    assert h(3.0, JobHold("a", "", "released")) == [] and h.c.jobs["a"].job.held == "user"
    with pytest.raises(ControllerError):
        h(4.0, JobHold("nope", "user", "held"))


def test_a_running_job_held_keeps_running_and_waits_held_when_requeued() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "a", gpus=8, retries=1)
    h.start_all(1.0, "a")
    out = h(2.0, JobHold("a", "admin", "held by root"))
    assert moves(out, "a") == [(S.RUNNING, S.RUNNING)] and h.state("a") is S.RUNNING
    h.exit(3.0, "a", 0, code=1)  # failed, a retry left: pending again, held
    h(100.0, TimerFired("tick", "", 0))
    assert h.state("a") is S.PENDING and h.c.reason("a").code is ReasonCode.HELD_ADMIN


def test_a_signal_goes_to_the_live_ranks_of_a_started_job_and_changes_nothing() -> None:
    """scancel --signal in the core (ADR 0078): a Signal command for the ranks still running,
    no transition (nothing to write), the job running on; a pending job gets none."""
    h = Harness(cluster_spec(2, 8))
    h.submit(0.0, "run", gpus=8, workers=2)
    h.start_all(1.0, "run")
    h.submit(2.0, "wait", gpus=8)
    out = h(3.0, JobSignal("run", 10, "batch"))
    assert out == [Signal("run", h.c.jobs["run"].job.attempt, (0, 1), 10, "batch")]
    assert h.c.jobs["run"].job.state is S.RUNNING
    assert h(4.0, JobSignal("wait", 10)) == []
    with pytest.raises(ControllerError):
        h(5.0, JobSignal("nope", 10))
