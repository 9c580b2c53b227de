"""The one driver (``core.driver``): what it hands on, when it schedules, and that nothing of a
step reaches the executor before its journal committed. Times are numbers passed in."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from builders import cluster_spec, profile, spec

from gpufleet.core.commands import Command, Launch, SetTimer, Transition
from gpufleet.core.controller import Controller
from gpufleet.core.driver import Driver, PassRule, Step
from gpufleet.core.events import JobCancelled, JobSubmitted, TaskStarted
from gpufleet.model.job import JobState


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[Command]] = []

    def apply(self, commands: Sequence[Command]) -> None:
        self.batches.append(list(commands))


class FailingJournal:
    def __init__(self) -> None:
        self.fail = True
        self.seen: list[Step] = []

    def commit(self, step: Step) -> None:
        self.seen.append(step)
        if self.fail:
            raise RuntimeError("the store is down")


def driver(rule: PassRule | None = None, journal: object = None) -> tuple[Driver, Recorder]:
    ex = Recorder()
    core = Controller(profile(), cluster_spec(1, 8))
    return Driver(core, ex, journal, rule, start=0.0), ex  # type: ignore[arg-type]


def submit(job_id: str, at: float, **kw: object) -> JobSubmitted:
    return JobSubmitted(job_id, spec(job_id, **kw), at)


def test_timers_stay_with_the_driver_and_fire_when_due() -> None:
    d, ex = driver()
    d.step(0.0, [submit("a", 0.0, limit=60.0)])
    sent = [c for b in ex.batches for c in b]
    assert any(isinstance(c, Launch) for c in sent)
    assert not any(isinstance(c, SetTimer) for c in sent)  # the driver keeps them
    assert d.due() == 60.0
    d.step(1.0, [TaskStarted("a", 1, 0)])
    d.step(60.0)  # the time limit: a kill goes out
    assert d.core.jobs["a"].job.state is JobState.RUNNING  # until its rank has exited
    assert [c.why for c in ex.batches[-1] if hasattr(c, "ranks")] == ["timed_out"]


def test_a_pass_waits_for_the_gap_on_the_clock() -> None:
    d, _ = driver(PassRule(min_gap_s=0.5))
    first = d.step(10.0, [submit("a", 10.0, gpus=1)])
    assert first.scheduled
    held = d.step(10.2, [submit("b", 10.2, gpus=1)])
    assert not held.scheduled and d.due() == pytest.approx(10.5)
    assert d.core.jobs["b"].job.state is JobState.PENDING
    later = d.step(10.5)  # no new event: the held pass runs when due
    assert later.scheduled and d.core.jobs["b"].job.state is JobState.STARTING


def test_the_tick_schedules_whatever_changed() -> None:
    d, _ = driver(PassRule(min_gap_s=100.0, tick_s=5.0))
    assert d.due() == 5.0
    d.step(1.0, [submit("a", 1.0)])
    s = d.step(5.0)
    assert s.ticked and s.scheduled and d.due() == pytest.approx(10.0)


def test_nothing_reaches_the_executor_before_the_journal_committed() -> None:
    j = FailingJournal()
    d, ex = driver(journal=j)
    with pytest.raises(RuntimeError, match="store is down"):
        d.step(0.0, [submit("a", 0.0)])
    assert ex.batches == []  # the launch was decided, never handed on
    assert any(isinstance(c, Launch) for c in j.seen[0].commands)


def test_an_event_the_core_refuses_fails_alone() -> None:
    d, ex = driver()
    bad = JobCancelled("nope")
    s = d.step(0.0, [bad, submit("a", 0.0)])
    assert [ev for ev, _ in s.refused] == [bad] and "unknown job nope" in str(s.refused[0][1])
    assert any(isinstance(c, Transition) and c.job_id == "a" for c in ex.batches[0])


def test_a_launch_superseded_in_the_same_step_never_goes_out() -> None:
    d, ex = driver()
    d.step(0.0, [submit("a", 0.0, gpus=8)])
    launch = next(c for c in ex.batches[0] if isinstance(c, Launch))
    assert d.core.deliverable(launch) == launch
    # the job moved on to another attempt: the old launch is no longer deliverable
    d.core.jobs["a"].job.attempt += 1
    assert d.core.deliverable(launch) is None
