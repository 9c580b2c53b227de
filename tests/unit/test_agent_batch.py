"""The agent's side of a batch job, with real processes: the task starts in its working
directory (entered as its user, /tmp with slurmstepd's message when it cannot), the batch
script's output files are written by the task's side and the agent's logs keep a copy, the
submitter's environment is the base of the task's, and the other ranks run the step daemon."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.agent.runner import RunnerEvent, TaskRunner
from gpufleet.agent.runner.process import main_processes
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.clock import ManualClock

PY = sys.executable


def cmd(command: list[str], rank: int = 0, attempt: int = 1, **kw: object) -> AgentCommand:
    return AgentCommand.model_validate(
        {"kind": "launch", "job": "b1", "attempt": attempt, "rank": rank, "command": command, **kw}
    )


@pytest.fixture
def runner(tmp_path: Path) -> TaskRunner:
    r = TaskRunner(tmp_path / "agent", lambda gpus: "", ManualClock(100.0))
    yield r  # type: ignore[misc]
    for k in r.live():
        r.kill(k, 0, "test over")
    r.wait(5.0)


def run(runner: TaskRunner, c: AgentCommand) -> RunnerEvent:
    assert runner.launch(c)[0].kind == "started"
    [ev] = [e for e in runner.wait(60.0) if e.kind == "exited"]
    return ev


def logs(runner: TaskRunner, c: AgentCommand) -> tuple[str, str]:
    out, err = runner.log_paths((c.job, c.attempt, c.rank))
    return out.read_text(), err.read_text()


def test_a_relative_script_runs_in_the_working_directory(
    runner: TaskRunner, tmp_path: Path
) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text("import os; print('trained in', os.getcwd())\n")
    c = cmd(["python3", "train.py"], workdir=str(proj), env={"PATH": os.environ["PATH"]})
    ev = run(runner, c)
    assert ev.exit_code == 0, logs(runner, c)
    assert logs(runner, c)[0] == f"trained in {proj}\n"


def test_a_working_directory_it_cannot_enter_is_tmp_as_in_slurm(runner: TaskRunner) -> None:
    c = cmd(["/bin/sh", "-c", "pwd"], workdir="/nonexistent/dir")
    assert run(runner, c).exit_code == 0
    out, err = logs(runner, c)
    assert out == "/tmp\n"
    assert err == (
        "slurmstepd: error: couldn't chdir to `/nonexistent/dir': No such file or directory: "
        "going to /tmp instead\n"
    )


def test_the_output_files_get_the_scripts_output_and_the_logs_a_copy(
    runner: TaskRunner, tmp_path: Path
) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "slurm-b1.out").write_text("an old run\n")
    script = "echo out; echo err >&2; exit 3"
    c = cmd(["/bin/sh", "-c", script], role="batch", workdir=str(proj), output="slurm-b1.out")
    ev = run(runner, c)
    assert ev.exit_code == 3
    assert sorted((proj / "slurm-b1.out").read_text().split()) == ["err", "out"]  # truncated
    assert logs(runner, c) == ("out\n", "err\n")  # gpufleet logs still has both
    # another attempt (a requeue) appends, as does open_mode append; --error its own file
    c2 = cmd(["/bin/sh", "-c", script], attempt=2, role="batch", workdir=str(proj),
             output="slurm-b1.out", error="e.txt", append=True)  # fmt: skip
    assert run(runner, c2).exit_code == 3
    assert sorted((proj / "slurm-b1.out").read_text().split()) == ["err", "out", "out"]
    assert (proj / "e.txt").read_text() == "err\n"


def test_an_output_file_that_cannot_be_opened_fails_the_script(
    runner: TaskRunner, tmp_path: Path
) -> None:
    c = cmd(["/bin/true"], role="batch", workdir=str(tmp_path), output="no/such/dir/o.txt")
    assert run(runner, c).exit_code == 1
    assert "Could not open stdout file no/such/dir/o.txt" in logs(runner, c)[1]


def test_a_killed_script_exits_as_killed_and_its_output_is_kept(
    runner: TaskRunner, tmp_path: Path
) -> None:
    code = "import time; print('ready', flush=True); time.sleep(60)"
    c = cmd([PY, "-c", code], role="batch", workdir=str(tmp_path), output="o.txt")
    key = ("b1", 1, 0)
    runner.launch(c)
    out, _ = runner.log_paths(key)
    end = 200
    while b"ready" not in out.read_bytes() and end:
        runner.wait(0.05)
        end -= 1
    runner.kill(key, 5.0, "cancelled")
    [ev] = [e for e in runner.wait(60.0) if e.kind == "exited"]
    assert ev.exit_code == 128 + signal.SIGTERM and "killed by SIGTERM" in ev.why
    assert (tmp_path / "o.txt").read_text() == "ready\n"


def test_the_submitters_environment_is_the_base_but_not_the_accounts_keys(
    runner: TaskRunner, tmp_path: Path
) -> None:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "tool").write_text("#!/bin/sh\necho venv tool\n")
    (venv / "tool").chmod(0o755)
    user_env = {"PATH": f"{venv}:/usr/bin:/bin", "HOME": "/elsewhere", "MINE": "1", "K": "cap"}
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    c = cmd([PY, "-c", code], user_env=user_env, env={"K": "spec", "SLURM_JOB_ID": "b1"})
    assert run(runner, c).exit_code == 0
    env = json.loads(logs(runner, c)[0])
    assert env["PATH"] == user_env["PATH"] and env["MINE"] == "1"
    assert env["K"] == "spec"  # the job's own env wins over what was captured
    assert env["HOME"] != "/elsewhere"  # the account's own
    c = cmd(["tool"], rank=0, attempt=2, user_env=user_env)
    assert run(runner, c).exit_code == 0 and logs(runner, c)[0] == "venv tool\n"


def catches(pid: int, sig: int) -> bool:
    """Whether ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    (mask,) = [ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")]
    return bool(int(mask, 16) >> (sig - 1) & 1)


def until(pred: Callable[[], bool], runner: TaskRunner) -> None:
    for _ in range(1000):
        if pred():
            return
        assert runner.wait(0.01) == []  # nothing ends meanwhile
    raise AssertionError("not within 10 s")


def test_a_step_host_runs_the_step_daemon_until_stopped(runner: TaskRunner) -> None:
    with socket.socket() as s:  # a free port for the daemon's own entry
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    steps = {
        "GPUFLEET_STEP_HOSTS": f"127.0.0.1:{port - 1},127.0.0.1:{port}",
        "GPUFLEET_STEP_SLOT": "1",
        "GPUFLEET_STEP_KEY": "ab" * 32,
    }
    c = cmd([], rank=1, role="step", env=steps)
    assert runner.launch(c)[0].kind == "started"
    task = runner._live[("b1", 1, 1)]  # the daemon: its keeper's child
    holds = lambda: any(catches(p, signal.SIGTERM) for p in main_processes(task))  # noqa: E731
    until(holds, runner)  # it holds its node, until stopped
    runner.kill(("b1", 1, 1), 5.0, "batch script ended")
    [ev] = [e for e in runner.wait(60.0) if e.kind == "exited"]
    assert ev.exit_code == 0, logs(runner, c)


def test_a_batch_only_warning_reaches_the_script_not_its_output_copier(
    runner: TaskRunner, tmp_path: Path
) -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGUSR1, lambda *_: (print('warned', flush=True), sys.exit(5)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    c = cmd([PY, "-c", code], role="batch", workdir=str(tmp_path), output="o.txt",
            time_limit_s=100.0, signal=int(signal.SIGUSR1), signal_before_s=90.0,
            signal_batch_only=True)  # fmt: skip
    assert runner.launch(c)[0].kind == "started"
    out, _ = runner.log_paths(("b1", 1, 0))
    until(lambda: b"ready" in out.read_bytes(), runner)
    runner.clock.advance(11.0)  # type: ignore[attr-defined]
    [ev] = [e for e in runner.wait(60.0) if e.kind == "exited"]
    assert ev.exit_code == 5  # the script's own exit, after its handler ran
    assert (tmp_path / "o.txt").read_text() == "ready\nwarned\n", logs(runner, c)


def test_input_is_the_scripts_stdin(runner: TaskRunner, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("fed\n")
    c = cmd(["/bin/sh", "-c", "read x; echo got $x"], role="batch", workdir=str(tmp_path),
            output="o.txt", input="in.txt")  # fmt: skip
    assert run(runner, c).exit_code == 0
    assert (tmp_path / "o.txt").read_text() == "got fed\n"
    c = cmd(["/bin/true"], attempt=2, role="batch", workdir=str(tmp_path), output="o.txt",
            input="missing.txt")  # fmt: skip
    assert run(runner, c).exit_code == 1
    assert "Could not open stdin file missing.txt" in logs(runner, c)[1]
