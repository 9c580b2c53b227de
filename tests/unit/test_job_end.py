"""How a job ended (model/job_end.py), worked out by the core when it ends, in Slurm's words:
what a real Slurm 22.05 printed for the same endings (``scontrol show job``'s Reason= and
ExitCode=; slurm_local.sh): exit 3 → NonZeroExitCode 3:0; killed by its time limit → TimeLimit
0:15; cancelled running → None 0:15; cancelled pending → its pending reason, 0:0; a script
killed by a signal → JobLaunchFailure 0:9; completed → None 0:0."""

from __future__ import annotations

import pytest
from builders import cluster_spec
from test_controller import Harness, of

from gpufleet.client.calls import Row
from gpufleet.core.commands import Kill, SetTimer
from gpufleet.core.events import JobCancelled, NodeLost, TaskExited, TimerFired
from gpufleet.io import jobs_table, slurm_style
from gpufleet.model.job_end import JobEnd, exit_status


def ended(h: Harness, job: str) -> JobEnd | None:
    return h.c.jobs[job].job.ended


def killed_by(out: list, h: Harness, now: float, signal: str, code: int) -> list:
    """Every rank a Kill names exits as the agent reports a signal's death."""
    evs = [
        TaskExited(k.job_id, k.attempt, r, code, f"{k.why}; killed by {signal}")
        for k in of(out, Kill)
        for r in k.ranks
    ]
    return h(now, *evs)


def test_an_exit_code_a_signal_and_a_success() -> None:
    h = Harness(cluster_spec(2, 8))
    for job in ("three", "nine", "ok"):
        h.submit(0.0, job, gpus=1)
        h.start_all(1.0, job)
    assert ended(h, "three") is None  # running: it has not ended
    h.exit(2.0, "three", 0, code=3, why="exited with code 3")
    h.exit(2.0, "nine", 0, code=137, why="killed by SIGKILL")
    h.exit(2.0, "ok", 0)
    assert ended(h, "three") == JobEnd("NonZeroExitCode", 3, 0)
    assert ended(h, "three").exit_code == "3:0"  # type: ignore[union-attr]
    assert ended(h, "nine") == JobEnd("JobLaunchFailure", 0, 9)
    assert ended(h, "ok") == JobEnd("None", 0, 0)


def test_a_gang_ends_as_its_first_failed_rank() -> None:
    h = Harness(cluster_spec(2, 8))
    h.submit(0.0, "g", gpus=8, workers=2)
    h.start_all(1.0, "g")
    out = h.exit(2.0, "g", 1, code=4, why="exited with code 4")
    killed_by(out, h, 3.0, "SIGTERM", 143)  # rank 0 stopped for the gang: not the cause
    assert ended(h, "g") == JobEnd("NonZeroExitCode", 4, 0)


def test_the_time_limit_and_a_cancel() -> None:
    h = Harness(cluster_spec(1, 8))
    out = h.submit(0.0, "late", gpus=1, limit=50.0)
    (timer,) = of(out, SetTimer)
    h.start_all(1.0, "late")
    out = h(timer.at, TimerFired(timer.kind, timer.job_id, timer.attempt))
    killed_by(out, h, 50.5, "SIGTERM", 143)
    assert ended(h, "late") == JobEnd("TimeLimit", 0, 15)
    h.submit(60.0, "run", gpus=1)
    h.start_all(61.0, "run")
    out = h(62.0, JobCancelled("run"))
    killed_by(out, h, 62.5, "SIGTERM", 143)
    assert ended(h, "run") == JobEnd("None", 0, 15)


def test_a_pending_cancel_keeps_why_it_waited() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "big", gpus=8)
    h.submit(0.0, "waits", gpus=8)
    assert h.c.reason("waits").code.value == "Resources"
    h(1.0, JobCancelled("waits"))
    assert ended(h, "waits") == JobEnd("Resources", 0, 0)


def test_a_retried_job_ends_once_and_a_dependency_never_satisfied() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "r", gpus=1, retries=1)
    h.submit(0.0, "after", gpus=1, depends_on=[("afterok", "r")])
    h.start_all(1.0, "r")
    h.exit(2.0, "r", 0, code=2)
    assert ended(h, "r") is None  # pending again for its retry
    h.c.jobs["r"].job.eligible_time = 0.0
    h(100.0, TimerFired("backoff", "r", 1))
    h.start_all(101.0, "r")
    h.exit(102.0, "r", 0, code=5)
    assert ended(h, "r") == JobEnd("NonZeroExitCode", 5, 0)
    assert ended(h, "after") is None  # it waits, DependencyNeverSatisfied, as in Slurm
    h(103.0, JobCancelled("after"))  # until its user cancels it: it ended so (scontrol's)
    # and scontrol's Dependency= goes on saying what it was never met by, as Slurm's does
    assert ended(h, "after") == JobEnd("DependencyNeverSatisfied", 0, 0, "afterok:r(failed)")


def test_a_job_that_ends_pending_keeps_its_unmet_dependencies_one_that_ran_none() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "d", gpus=1)
    h.submit(0.0, "e", gpus=1, depends_on=[("afterok", "d")])
    h.submit(0.0, "f", gpus=1, depends_on=[("afterok", "d")])
    h.start_all(1.0, "d")
    h(2.0, JobCancelled("f"))  # while d runs
    assert ended(h, "f") == JobEnd("Dependency", 0, 0, "afterok:d(unfulfilled)")
    h.exit(3.0, "d", 0, code=0)
    h.start_all(4.0, "e")
    h.exit(5.0, "e", 0, code=0)
    assert ended(h, "e") == JobEnd("None", 0, 0)  # met, then ran: (null)
    end = JobEnd("Dependency", 0, 0, "afterok:d(unfulfilled)")
    assert JobEnd.from_dict(end.to_dict()) == end
    assert "dependency" not in JobEnd("None").to_dict()  # stored as before when none


def test_a_lost_node_ends_a_job_that_asked_not_to_be_requeued() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "n", gpus=1, requeue=False)
    h.start_all(1.0, "n")
    h(5.0, NodeLost(h.launch("n").allocation[0].node))
    assert ended(h, "n") == JobEnd("NodeDown", 0, 0)


def test_exit_status_reads_the_agents_words() -> None:
    assert exit_status(3, "exited with code 3") == (3, 0)
    assert exit_status(143, "cancelled; killed by SIGTERM") == (0, 15)
    assert exit_status(137, "killed by SIGKILL after 5 s grace") == (0, 9)
    assert exit_status(143, "exited with code 143") == (143, 0)  # exit 143 is no signal
    assert JobEnd.from_dict(JobEnd("TimeLimit", 0, 15).to_dict()) == JobEnd("TimeLimit", 0, 15)


def _row(state: str, ended: JobEnd | None, nodes: tuple[str, ...] = ("n1",)) -> Row:
    """A lean client's row of ``GET /jobs`` (what the shims read), as JSON decodes it."""
    out = Row(id="7", name="wrap", user="alice", queue="gpu", state=state, submit_time=0.0,
              start_time=1.0, end_time=2.0, gpus=1.0, workers=1, spec=Row(),
              placement=[Row(node=n) for n in nodes], reason=None)  # fmt: skip
    if ended is not None:
        out["ended"] = Row(reason=ended.reason, exit_code=ended.exit_code)
    return out


@pytest.mark.parametrize(
    ("state", "ended", "shown"),
    [  # squeue's %t %r %R, as a real Slurm printed them for the same ends
        ("FAILED", JobEnd("NonZeroExitCode", 3), "F NonZeroExitCode (NonZeroExitCode)"),
        ("FAILED", JobEnd("JobLaunchFailure", 0, 9), "F JobLaunchFailure (JobLaunchFailure)"),
        ("TIMED_OUT", JobEnd("TimeLimit", 0, 15), "TO TimeLimit (TimeLimit)"),
        ("CANCELLED", JobEnd("None", 0, 15), "CA None n1"),
        ("SUCCEEDED", JobEnd(), "CD None n1"),
        # a job that ended before its end was kept: its state's usual reason
        ("FAILED", None, "F NonZeroExitCode (NonZeroExitCode)"),
        ("TIMED_OUT", None, "TO TimeLimit (TimeLimit)"),
    ],
)
def test_squeue_prints_the_end(state: str, ended: JobEnd | None, shown: str) -> None:
    text = slurm_style.render("%t %r %R", [_row(state, ended)], header=False, now=10.0)
    assert text == shown + "\n"


def test_the_jobs_table_says_an_end_that_was_not_exit_0() -> None:
    assert jobs_table.where(_row("FAILED", JobEnd("NonZeroExitCode", 3))) == (
        "n1 (NonZeroExitCode) ExitCode=3:0"
    )
    assert jobs_table.where(_row("SUCCEEDED", JobEnd())) == "n1"
    assert (
        jobs_table.where(_row("CANCELLED", JobEnd("Resources"), ())) == "(Resources) ExitCode=0:0"
    )
