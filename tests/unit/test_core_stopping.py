"""A job whose stop is under way (its outcome decided, its ranks being killed) frees its
devices as far as the scheduler plans: from the moment the stop began, not at its time limit
(or never, without one). So the job first in line reserves them, and a later job with no time
limit does not take the freed half ahead of it, as it did when a batch script ended on one
node while the step daemon on the other was still being stopped."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, profile, spec

from gpufleet.core.commands import Command, Launch
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted, TaskExited, TaskStarted


def launched(out: list[Command]) -> list[str]:
    return [c.job_id for c in out if isinstance(c, Launch)]


def test_the_head_reserves_a_stopping_jobs_devices_and_nothing_jumps_ahead() -> None:
    c = Controller(profile(), cluster_spec(2, 8))
    c.handle(0.0, JobSubmitted("b", replace(spec("b", gpus=8, workers=2), batch=True), 0.0))
    c.handle(1.0, *(TaskStarted("b", 1, r) for r in range(2)))
    c.handle(2.0, JobSubmitted("big", spec("big", gpus=8, workers=2), 2.0))
    c.handle(3.0, JobSubmitted("small", spec("small", gpus=8), 3.0))

    out = c.handle(10.0, TaskExited("b", 1, 0, 0))  # the script ended: rank 1 is being stopped
    view = c.state.running["b"]
    assert view.stopping_since == 10.0 and view.expected_end == 10.0
    assert view.allocation == c.jobs["b"].allocation[1:]  # rank 0's devices are free already
    assert launched(out) == []  # n01 is free, but "small" would delay "big"
    assert c.last is not None and c.last.reservation is not None
    assert c.last.reservation.job_id == "big" and c.last.reservation.start_time == 10.0

    out = c.handle(10.5, TaskExited("b", 1, 1, 143))
    assert launched(out) == ["big"]


def test_a_plain_gangs_exited_rank_leaves_its_expected_end() -> None:
    c = Controller(profile(), cluster_spec(2, 8))
    g = replace(spec("g", gpus=8, workers=2), time_limit_s=100.0)
    c.handle(0.0, JobSubmitted("g", g, 0.0))
    c.handle(1.0, *(TaskStarted("g", 1, r) for r in range(2)))
    c.handle(5.0, TaskExited("g", 1, 0, 0))  # rank 0 done; rank 1 runs on
    view = c.state.running["g"]
    assert view.stopping_since is None and view.expected_end == 100.0
    assert view.allocation == c.jobs["g"].allocation[1:]
    assert c.state.snapshot(6.0, 0).ends == ((100.0, view.allocation),)
