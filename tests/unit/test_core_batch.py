"""A batch job's outcome is its script's (Slurm's batch step), an explicit rule of the pure
core: rank 0's exit ends the job with its code, the other ranks (step daemons) are then
stopped without that being a failure, and a step daemon that ends by itself fails the job.
A plain gang is judged as before: any rank's failure fails it, it succeeds when all exit 0."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, profile, spec

from gpufleet.core.commands import Command, Kill, SetTimer, Transition
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobCancelled, JobSubmitted, TaskExited, TaskStarted
from gpufleet.model.job import JobState

S = JobState


class Batch:
    def __init__(self, *, batch: bool = True, retries: int = 0) -> None:
        self.c = Controller(profile(), cluster_spec(2, 8))
        s = replace(spec("b", gpus=8, workers=2, retries=retries), batch=batch)
        self.c.handle(0.0, JobSubmitted("b", s, 0.0))
        self.c.handle(1.0, *(TaskStarted("b", 1, r) for r in range(2)))

    def exit(self, now: float, rank: int, code: int = 0, why: str = "") -> list[Command]:
        return self.c.handle(now, TaskExited("b", self.c.jobs["b"].job.attempt, rank, code, why))

    @property
    def state(self) -> JobState:
        return self.c.jobs["b"].job.state


def moves(out: list[Command]) -> list[tuple[JobState | None, JobState, str]]:
    return [(t.old, t.new, t.why) for t in out if isinstance(t, Transition)]


def kills(out: list[Command]) -> list[Kill]:
    return [k for k in out if isinstance(k, Kill)]


def test_the_script_exiting_0_ends_the_job_and_stops_the_step_daemons() -> None:
    b = Batch()
    out = b.exit(10.0, 0, 0)
    assert kills(out) == [Kill("b", 1, (1,), "batch script ended")]
    assert b.state is S.RUNNING  # until the step daemon has exited
    out = b.exit(10.5, 1, 143, "batch script ended; killed by SIGTERM")  # stopped: no failure
    assert moves(out) == [(S.RUNNING, S.SUCCEEDED, "the batch script exited 0")]


def test_the_scripts_exit_code_is_the_jobs() -> None:
    b = Batch(retries=1)
    out = b.exit(10.0, 0, 3)
    assert kills(out) == [Kill("b", 1, (1,), "batch script failed")]
    out = b.exit(10.5, 1, 0)  # the step daemon stopped cleanly: the job still failed
    assert [m[:2] for m in moves(out)] == [(S.RUNNING, S.FAILED), (S.FAILED, S.PENDING)]
    assert "code 3" in moves(out)[0][2]
    assert any(isinstance(c, SetTimer) and c.kind == "backoff" for c in out)


def test_a_step_daemon_that_ends_by_itself_fails_the_job_even_with_code_0() -> None:
    b = Batch()
    out = b.exit(5.0, 1, 0)
    assert kills(out) == [Kill("b", 1, (0,), "a step daemon of the job ended")]
    out = b.exit(5.5, 0, 143)
    ((old, new, why),) = moves(out)
    assert (old, new) == (S.RUNNING, S.FAILED)
    assert why.startswith("the step daemon of rank 1 on n01 ended while the batch script ran")


def test_a_cancel_wins_over_the_scripts_end() -> None:
    b = Batch()
    b.exit(5.0, 0, 0)
    b.c.handle(5.1, JobCancelled("b"))
    out = b.exit(5.5, 1, 143)
    assert [m[:2] for m in moves(out)] == [(S.RUNNING, S.CANCELLED)]


def test_a_plain_gang_is_judged_as_before() -> None:
    b = Batch(batch=False)
    assert kills(b.exit(10.0, 0, 0)) == []  # rank 0 done: rank 1 still runs, nothing stopped
    assert b.state is S.RUNNING
    out = b.exit(12.0, 1, 0)
    assert moves(out) == [(S.RUNNING, S.SUCCEEDED, "every rank exited 0")]
    b = Batch(batch=False)
    out = b.exit(5.0, 1, 2)  # any rank's failure fails the gang
    assert kills(out) == [Kill("b", 1, (0,), "gang member failed")]
