"""A preemption's notice on a node, with real processes: the job's signal first, then SIGTERM
as soon as its checkpoint file ($GPUFLEET_CHECKPOINT_FILE) is written, or when the wait is
over; a cancel during the wait does not wait; the checkpoint's writes are reported (rank 0).
Deadlines run on a ManualClock; only real exits and files are awaited, always with a bound."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from gpufleet.agent.runner import RunnerEvent, TaskRunner
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.clock import ManualClock
from gpufleet.model.notice import StopNotice
from support.waiting import wait_for

# on USR1: note it, and (when asked) write the checkpoint file; on TERM: note it and exit 0.
# The handlers only note the signal and the loop acts on it: a handler raising SystemExit can
# run nested in the finalizer of the USR1 handler's file (the SIGTERM goes out the moment the
# USR1 mark exists), where CPython drops the exception silently and the task lives on
TASK = r"""
import os, signal, sys, time
marks, write = sys.argv[1], sys.argv[2] == "write"
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append("usr1"))
signal.signal(signal.SIGTERM, lambda *_: got.append("term"))
print("ready", flush=True)
while True:
    time.sleep(0.05)
    while got:
        sig = got.pop(0)
        with open(os.path.join(marks, sig), "a") as f:
            f.write("x")
        if sig == "usr1" and write:
            with open(os.environ["GPUFLEET_CHECKPOINT_FILE"], "w") as f:
                f.write("step 7\n")
        if sig == "term":
            sys.exit(0)
"""
KEY = ("j1", 1, 0)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


@pytest.fixture
def runner(tmp_path: Path, clock: ManualClock) -> TaskRunner:
    r = TaskRunner(tmp_path / "agent", lambda gpus: "", clock)
    yield r  # type: ignore[misc]
    for k in r.live():
        r.kill(k, 0, "test over")
    r.wait(5.0)


def start(runner: TaskRunner, marks: Path, work: Path, *, write: bool) -> None:
    marks.mkdir()
    work.mkdir()
    c = AgentCommand(
        kind="launch",
        job=KEY[0],
        attempt=KEY[1],
        rank=KEY[2],
        command=[sys.executable, "-c", TASK, str(marks), "write" if write else "no"],
        workdir=str(work),
        checkpoint_file="gpufleet-j1.checkpoint",
        grace_s=30.0,
    )
    runner.launch(c)
    out, _ = runner.log_paths(KEY)
    wait_for("the task ready", lambda: b"ready" in out.read_bytes(), 30)


def noticed(runner: TaskRunner, tmp_path: Path) -> Path:
    """A task that writes no checkpoint, preempted with a 120 s SIGUSR1 notice, the signal
    seen: its marks folder."""
    marks = tmp_path / "marks"
    start(runner, marks, tmp_path / "work", write=False)
    runner.kill(KEY, 10.0, "preempted", notice=StopNotice(signal.SIGUSR1, 120.0))
    wait_for("the notice's signal", (marks / "usr1").exists, 30)
    return marks


def exited(runner: TaskRunner) -> RunnerEvent:
    [ev] = [e for e in runner.wait(60.0) if e.kind == "exited"]
    return ev


def test_the_checkpoint_file_ends_the_wait_and_then_sigterm(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path
) -> None:
    marks, work = tmp_path / "marks", tmp_path / "work"
    start(runner, marks, work, write=True)
    ckpt = work / "gpufleet-j1.checkpoint"
    runner.kill(KEY, 10.0, "preempted", notice=StopNotice(signal.SIGUSR1, 120.0))
    wait_for("the checkpoint written", ckpt.exists, 30)
    assert not (marks / "term").exists()  # the notice's signal only, so far
    clock.advance(1.0)  # far inside the 120 s: the file ends the wait
    events = runner.poll()
    ev = exited(runner)
    assert (marks / "usr1").read_text() == "x" and (marks / "term").read_text() == "x"
    assert (ev.exit_code, ev.why) == (0, "preempted; exited with code 0")
    # the write during this attempt is reported to the controller, by its age
    [seen] = [e for e in events if e.kind == "checkpoint"]
    assert seen.key == KEY and 0 <= seen.age_s < 60


def test_without_a_checkpoint_the_sigterm_waits_for_the_notice_to_end(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path
) -> None:
    marks = noticed(runner, tmp_path)
    clock.advance(119.0)
    assert runner.poll() == [] and runner.live() == [KEY]
    assert not (marks / "term").exists()
    clock.advance(1.0)  # the wait is over
    runner.poll()
    exited(runner)
    assert (marks / "term").read_text() == "x"


def test_a_cancel_during_the_notice_does_not_wait(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path
) -> None:
    marks = noticed(runner, tmp_path)
    clock.advance(1.0)
    runner.kill(KEY, 10.0, "cancelled by alice")  # no notice: SIGTERM now
    ev = exited(runner)
    assert (marks / "term").read_text() == "x" and ev.exit_code == 0


def test_the_task_finds_its_checkpoint_file_in_its_working_directory(
    runner: TaskRunner, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    code = "import os; print(os.environ['GPUFLEET_CHECKPOINT_FILE'])"
    c = AgentCommand(
        kind="launch", job="j1", attempt=3, rank=0, command=[sys.executable, "-c", code],
        workdir=str(work), checkpoint_file="gpufleet-j1.checkpoint",
    )  # fmt: skip
    runner.launch(c)
    exited(runner)
    out, _ = runner.log_paths(("j1", 3, 0))
    assert out.read_text().strip() == os.path.join(work, "gpufleet-j1.checkpoint")


# a batch script (its shell: this process) that runs one step: a program named srun
SHELL = r"""
import os, signal, subprocess, sys, time
marks, srun = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGUSR1, lambda *_: open(os.path.join(marks, "shell"), "a").write("x"))
step = subprocess.Popen([sys.executable, srun, marks])
time.sleep(0.3)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""
SRUN = r"""
import os, signal, sys, time
marks = sys.argv[1]
signal.signal(signal.SIGUSR1, lambda *_: open(os.path.join(marks, "srun"), "a").write("x"))
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("batch_only", [False, True])
def test_a_batch_jobs_signal_goes_to_its_steps_or_with_b_to_its_shell(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path, batch_only: bool
) -> None:
    """Slurm's --signal: 'By default all job steps will be signaled, but not the batch shell
    itself'; with B: the batch shell alone (srun passes it on to its step's tasks)."""
    marks, work = tmp_path / "marks", tmp_path / "work"
    marks.mkdir()
    work.mkdir()
    (work / "srun").write_text(SRUN)
    c = AgentCommand(
        kind="launch", job="b1", attempt=1, rank=0, role="batch",
        command=[sys.executable, "-c", SHELL, str(marks), str(work / "srun")],
        workdir=str(work), output="out.txt", time_limit_s=100.0,
        signal=signal.SIGUSR1, signal_before_s=30.0, signal_batch_only=batch_only,
    )  # fmt: skip
    runner.launch(c)
    out = work / "out.txt"
    wait_for("the script ready", lambda: out.exists() and b"ready" in out.read_bytes(), 30)
    clock.advance(70.0)
    runner.poll()
    mark = marks / ("shell" if batch_only else "srun")
    wait_for("the signal", mark.exists, 30)
    other = marks / ("srun" if batch_only else "shell")
    runner.kill(("b1", 1, 0), 0, "test over")  # the mark above was written before this
    runner.wait(5.0)
    assert not other.exists()


def test_a_job_warned_by_its_signal_already_gets_sigterm_at_once(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path
) -> None:
    """Slurm's send_user_signal: 'the user signal will be sent if the user signal has been
    specified and not sent, otherwise a SIGTERM will be sent to the tasks'."""
    marks, work = tmp_path / "marks", tmp_path / "work"
    marks.mkdir()
    work.mkdir()
    c = AgentCommand(
        kind="launch", job="j1", attempt=1, rank=0,
        command=[sys.executable, "-c", TASK, str(marks), "no"], workdir=str(work),
        time_limit_s=100.0, signal=signal.SIGUSR1, signal_before_s=60.0, grace_s=30.0,
    )  # fmt: skip
    runner.launch(c)
    out, _ = runner.log_paths(KEY)
    wait_for("the task ready", lambda: out.exists() and b"ready" in out.read_bytes(), 30)
    clock.advance(40.0)
    runner.poll()  # the time limit's warning
    wait_for("the warning", (marks / "usr1").exists, 30)
    runner.kill(KEY, 10.0, "preempted", notice=StopNotice(signal.SIGUSR1, 60.0))
    exited(runner)
    assert (marks / "usr1").read_text() == "x" and (marks / "term").read_text() == "x"


def test_a_restarted_agent_finishes_the_notices_wait(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path
) -> None:
    """The wait is in the task's pid file: the next agent sends the SIGTERM when it is over."""
    marks = noticed(runner, tmp_path)
    new = TaskRunner(tmp_path / "agent", lambda gpus: "", clock)
    try:
        tasks, ended = new.adopt(rebooted=False)
        assert list(tasks) == [KEY] and ended == []
        clock.advance(119.0)
        assert new.poll() == [] and not (marks / "term").exists()
        clock.advance(1.0)
        new.poll()
        [ev] = [e for e in new.wait(60.0) if e.kind == "exited"]
        assert (marks / "term").read_text() == "x" and ev.exit_code == 0
    finally:
        for k in new.live():
            new.kill(k, 0, "test over")
        new.wait(5.0)


def test_a_registration_names_the_ranks_being_evicted(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path
) -> None:
    """A rank in a preemption's notice is named (for a controller that restarted meanwhile);
    one stopped for another reason (a cancel), or not ours, is not."""
    noticed(runner, tmp_path)
    assert [(r.job, r.attempt, r.rank) for r in runner.evicting({KEY})] == [KEY]
    assert runner.evicting(set()) == []
    runner.kill(KEY, 0.0, "cancelled")  # SIGTERM, then SIGKILL at once
    exited(runner)
    assert runner.evicting({KEY}) == []
