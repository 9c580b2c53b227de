"""The task runner with real subprocesses: environment, logs, exit codes, kill with grace, the
process group, the time limit. Deadlines run on a ManualClock; only real exits are awaited,
always with a bound."""

from __future__ import annotations

import json
import os
import pwd
import signal
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpufleet.agent.runner import EXIT_NOT_FOUND, EXIT_REFUSED, RunnerEvent, TaskRunner
from gpufleet.agent.taskenv import SECURE_PATH
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.clock import ManualClock
from support.waiting import wait_for

PY = sys.executable


def cmd(code: str, job: str = "j1", attempt: int = 0, rank: int = 0, **kw: object) -> AgentCommand:
    return AgentCommand.model_validate(
        {
            "kind": "launch",
            "job": job,
            "attempt": attempt,
            "rank": rank,
            "command": [PY, "-c", code],
            **kw,
        }
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


@pytest.fixture
def runner(tmp_path: Path, clock: ManualClock) -> TaskRunner:
    r = TaskRunner(tmp_path, lambda gpus: ",".join(f"GPU-{g}" for g in gpus), clock)
    yield r  # type: ignore[misc]
    for k in r.live():  # never leave a process behind
        r.kill(k, 0, "test over")
    r.wait(5.0)


def exited(events: list[RunnerEvent]) -> RunnerEvent:
    [ev] = [e for e in events if e.kind == "exited"]
    return ev


def ready(runner: TaskRunner, key: tuple[str, int, int]) -> None:
    """Wait until the task printed 'ready' (its signal handlers are in place)."""
    out, _ = runner.log_paths(key)
    wait_for("the task ready", lambda: b"ready" in out.read_bytes(), 5)


def test_env_has_only_the_ranks_gpus_and_the_launcher_variables(runner: TaskRunner) -> None:
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    env = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.7", "CUDA_VISIBLE_DEVICES": "9"}
    assert runner.launch(cmd(code, rank=3, gpus=[2, 5], env=env)) == [
        RunnerEvent("started", ("j1", 0, 3))
    ]
    ev = exited(runner.wait(60.0))
    assert (ev.exit_code, ev.why) == (0, "")
    out, _ = runner.log_paths(("j1", 0, 3))
    seen = json.loads(out.read_text())
    assert seen["CUDA_VISIBLE_DEVICES"] == "GPU-2,GPU-5"  # the agent's, not the command's
    assert (seen["RANK"], seen["WORLD_SIZE"], seen["MASTER_ADDR"]) == ("3", "4", "10.0.0.7")
    assert seen["PATH"] == SECURE_PATH  # a base of its own, not the agent's environment


def test_nothing_of_the_agents_environment_reaches_a_task(
    runner: TaskRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_TOKEN", "admin-secret")
    monkeypatch.setenv("WANDB_API_KEY", "agent-wandb")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    runner.launch(cmd(code, env={"LANG": "C.UTF-8", "WANDB_API_KEY": "the-jobs-own"}))
    assert exited(runner.wait(60.0)).exit_code == 0
    seen = json.loads(runner.log_paths(("j1", 0, 0))[0].read_text())
    seen.pop("LC_CTYPE", None)  # Python's own C-locale coercion (PEP 538), not ours
    me = pwd.getpwuid(os.geteuid())
    assert seen == {
        "PATH": SECURE_PATH,
        "HOME": me.pw_dir,
        "USER": me.pw_name,
        "LOGNAME": me.pw_name,
        "SHELL": me.pw_shell,
        "TMPDIR": str(runner.tmp_path(("j1", 0, 0))),
        # rank 0's metrics file, in its own TMPDIR (model/jobmetrics.py)
        "GPUFLEET_METRICS_FILE": str(runner.tmp_path(("j1", 0, 0)) / "gpufleet.metrics"),
        "LANG": "C.UTF-8",
        "WANDB_API_KEY": "the-jobs-own",
        "CUDA_VISIBLE_DEVICES": "",
    }


def test_a_node_variable_from_the_admin_reaches_every_task(
    tmp_path: Path, clock: ManualClock
) -> None:
    r = TaskRunner(tmp_path, str, clock, {"HTTP_PROXY": "http://proxy:3128"})
    r.launch(cmd("import os; print(os.environ['HTTP_PROXY'])"))
    assert exited(r.wait(10.0)).exit_code == 0
    assert r.log_paths(("j1", 0, 0))[0].read_text() == "http://proxy:3128\n"


def test_logs_are_the_tasks_alone_and_its_tmp_goes_with_it(runner: TaskRunner) -> None:
    code = "import os; open(os.path.join(os.environ['TMPDIR'], 'scratch'), 'w').write('x')"
    runner.launch(cmd(code))
    assert exited(runner.wait(60.0)).exit_code == 0
    out, err = runner.log_paths(("j1", 0, 0))
    assert [stat.S_IMODE(p.stat().st_mode) for p in (out, err)] == [0o600, 0o600]
    assert [stat.S_IMODE(d.stat().st_mode) for d in (out.parent, out.parent.parent)] == [
        0o700,
        0o700,
    ]
    assert not runner.tmp_path(("j1", 0, 0)).exists()  # removed when the task was reaped


@pytest.mark.parametrize(
    ("command", "env", "field"),
    [
        ([PY, "-c", "print('a\0b')"], {}, "command[2]"),
        ([PY, "-c", "pass"], {"TOKEN": "x\0y"}, "env['TOKEN']"),
        (["\0"], {}, "command[0]"),
    ],
)
def test_a_nul_byte_fails_that_task_alone_and_the_next_one_starts(
    runner: TaskRunner, command: list[str], env: dict[str, str], field: str
) -> None:
    bad = AgentCommand(kind="launch", job="j1", attempt=0, rank=0, command=command, env=env)
    [ev] = runner.launch(bad)
    assert (ev.kind, ev.exit_code) == ("exited", EXIT_REFUSED)
    assert field in ev.why and "NUL" in ev.why
    assert ev.why in runner.log_paths(("j1", 0, 0))[1].read_text()  # the user reads it there
    assert runner.launch(cmd("pass", rank=1)) == [RunnerEvent("started", ("j1", 0, 1))]
    assert exited(runner.wait(60.0)).exit_code == 0


def test_a_log_directory_that_cannot_be_made_fails_that_task_alone(
    runner: TaskRunner, tmp_path: Path
) -> None:
    (tmp_path / "blocked").write_text("a file where the job's directory goes")
    [ev] = runner.launch(cmd("pass", job="blocked"))
    assert (ev.kind, ev.exit_code) == ("exited", EXIT_REFUSED)
    assert "could not start the task" in ev.why and "blocked" in ev.why
    assert runner.launch(cmd("pass", job="next")) == [RunnerEvent("started", ("next", 0, 0))]
    assert exited(runner.wait(60.0)).exit_code == 0


def test_as_root_an_owner_without_an_account_is_refused_saying_how_to_fix_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    r = TaskRunner(tmp_path, str, clock, as_root=True)
    [ev] = r.launch(cmd("pass", run_as="no-such-user-gf"))
    assert ev.exit_code == EXIT_REFUSED
    assert "'no-such-user-gf' has no Unix account on this node" in ev.why
    assert "--fallback-account" in ev.why
    assert ev.why in r.log_paths(("j1", 0, 0))[1].read_text()
    assert r.live() == []


def test_a_named_fallback_account_runs_the_task_of_an_owner_without_one(
    tmp_path: Path, clock: ManualClock
) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    r = TaskRunner(tmp_path, str, clock, as_root=True)
    r.launch(
        cmd("import os; print(os.environ['USER'])", run_as="no-such-user-gf", fallback_account=me)
    )
    assert exited(r.wait(10.0)).exit_code == 0
    assert r.log_paths(("j1", 0, 0))[0].read_text() == f"{me}\n"


def test_a_program_under_tmp_is_refused_for_an_owner_whose_tmp_is_private(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The task's /tmp is its own (a bind mount): a program under the node's /tmp is not there,
    and the refusal says so instead of setpriv's bare 'No such file or directory'."""
    if os.geteuid() != 0:
        pytest.skip("only a root agent runs a task as its owner's account")
    prog = Path("/tmp") / f"gf-prog-{os.getpid()}"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    try:
        r = TaskRunner(tmp_path, str, clock, as_root=True)
        c = cmd("", run_as="nobody").model_copy(update={"command": [str(prog)]})
        [ev] = r.launch(c)
        assert ev.exit_code == EXIT_REFUSED
        assert f"the command {prog} is under /tmp" in ev.why and "private /tmp" in ev.why
        assert r.live() == []
    finally:
        prog.unlink()


def test_a_runner_that_is_not_root_runs_every_task_as_its_own_user(
    tmp_path: Path, clock: ManualClock
) -> None:
    r = TaskRunner(tmp_path, str, clock, as_root=False)
    r.launch(cmd("import os; print(os.getuid())", run_as="no-such-user-gf"))
    assert exited(r.wait(10.0)).exit_code == 0
    assert r.log_paths(("j1", 0, 0))[0].read_text() == f"{os.geteuid()}\n"


def test_stdout_and_stderr_go_to_files_under_job_and_attempt(
    runner: TaskRunner, tmp_path: Path
) -> None:
    code = "import sys; print('to out'); print('to err', file=sys.stderr); sys.exit(3)"
    runner.launch(cmd(code, job="train", attempt=2, rank=1))
    ev = exited(runner.wait(60.0))
    assert (ev.exit_code, ev.why) == (3, "exited with code 3")
    assert (tmp_path / "train" / "2" / "rank1.out").read_text() == "to out\n"
    assert (tmp_path / "train" / "2" / "rank1.err").read_text() == "to err\n"
    assert not (tmp_path / "train" / "2" / "rank1.pid").exists()  # reaped: no pid file left


def test_death_by_signal_exits_128_plus_the_signal(runner: TaskRunner) -> None:
    runner.launch(cmd("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    ev = exited(runner.wait(60.0))
    assert (ev.exit_code, ev.why) == (137, "killed by SIGKILL")


def test_kill_is_sigterm_first(runner: TaskRunner, clock: ManualClock) -> None:
    runner.launch(cmd("import time; print('ready', flush=True); time.sleep(60)"))
    ready(runner, ("j1", 0, 0))
    assert runner.kill(("j1", 0, 0), 10.0, "cancelled by alice")
    ev = exited(runner.wait(60.0))
    assert (ev.exit_code, ev.why) == (143, "cancelled by alice; killed by SIGTERM")


def test_a_task_that_ignores_sigterm_gets_sigkill_after_the_grace(
    runner: TaskRunner, clock: ManualClock
) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    runner.launch(cmd(code, grace_s=30.0))
    key = ("j1", 0, 0)
    ready(runner, key)
    runner.kill(key, 10.0, "cancelled")
    time.sleep(0.2)  # SIGTERM has had real time to act (and was ignored)
    clock.advance(9.9)
    assert runner.poll() == [] and runner.live() == [key]
    clock.advance(0.1)  # the grace is over
    runner.poll()
    ev = exited(runner.wait(60.0))
    assert ev.exit_code == 137
    assert ev.why == "cancelled; killed by SIGKILL after 10 s grace"


def test_the_whole_process_group_dies_with_the_task(runner: TaskRunner) -> None:
    code = (
        "import subprocess, sys, time; "
        f"c = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)']); "
        "print(c.pid, flush=True); print('ready', flush=True); time.sleep(60)"
    )
    runner.launch(cmd(code))
    key = ("j1", 0, 0)
    ready(runner, key)
    out, _ = runner.log_paths(key)
    child = int(out.read_text().split()[0])
    assert psutil.pid_exists(child)
    runner.kill(key, 5.0, "cancelled")
    exited(runner.wait(60.0))
    wait_for("the child gone", lambda: _gone(child), 5)


def test_children_left_behind_by_a_finished_task_are_killed(runner: TaskRunner) -> None:
    code = (
        "import subprocess; "
        f"c = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)']); print(c.pid)"
    )
    runner.launch(cmd(code))
    ev = exited(runner.wait(60.0))
    assert ev.exit_code == 0
    out, _ = runner.log_paths(("j1", 0, 0))
    wait_for("the child gone", lambda: _gone(int(out.read_text().split()[0])), 30)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_time_limit(runner: TaskRunner, clock: ManualClock) -> None:
    runner.launch(cmd("import time; print('ready', flush=True); time.sleep(60)", time_limit_s=5))
    ready(runner, ("j1", 0, 0))
    clock.advance(4.9)
    assert runner.poll() == []
    clock.advance(0.1)
    runner.poll()  # SIGTERM now
    ev = exited(runner.wait(60.0))
    assert ev.exit_code == 143
    assert ev.why == "time limit (5 s) exceeded; killed by SIGTERM"


def test_a_stale_attempt_never_runs(runner: TaskRunner, tmp_path: Path) -> None:
    runner.launch(cmd("pass", attempt=2))
    [ev] = runner.launch(cmd("open('ran', 'w')", attempt=1))
    assert (ev.kind, ev.exit_code) == ("exited", EXIT_REFUSED)
    assert "stale attempt 1" in ev.why
    runner.wait(60.0)
    assert not (tmp_path / "j1" / "1").exists()


def test_a_redelivered_launch_is_ignored_while_it_runs(runner: TaskRunner) -> None:
    c = cmd("import time; time.sleep(60)")
    runner.launch(c)
    assert runner.launch(c) == []
    assert runner.live() == [("j1", 0, 0)]


def test_a_command_that_cannot_start(runner: TaskRunner) -> None:
    bad = AgentCommand(kind="launch", job="j1", attempt=0, rank=0, command=["/no/such/binary"])
    [ev] = runner.launch(bad)
    assert (ev.kind, ev.exit_code) == ("exited", EXIT_NOT_FOUND)
    _, err = runner.log_paths(("j1", 0, 0))
    assert "cannot start '/no/such/binary'" in err.read_text()


def test_bad_job_ids_never_become_paths(runner: TaskRunner) -> None:
    [ev] = runner.launch(cmd("pass", job="../../etc"))
    assert ev.exit_code == EXIT_REFUSED and "bad job id" in ev.why


def test_gpu_load_counts_shares(runner: TaskRunner) -> None:
    runner.launch(cmd("import time; time.sleep(60)", rank=0, gpus=[0, 1]))
    runner.launch(cmd("import time; time.sleep(60)", rank=1, gpus=[2], gpu_milli=500))
    runner.launch(cmd("import time; time.sleep(60)", rank=2, gpus=[2], gpu_milli=250))
    assert runner.gpu_load() == {0: 1.0, 1: 1.0, 2: 0.75}


def test_a_restarted_agent_kills_the_tasks_left_behind(tmp_path: Path, clock: ManualClock) -> None:
    old = TaskRunner(tmp_path, str, clock)
    old.launch(cmd("import time; print('ready', flush=True); time.sleep(60)", job="left"))
    ready(old, ("left", 0, 0))
    pid = old._live[("left", 0, 0)].proc.pid
    new = TaskRunner(tmp_path, str, clock)
    assert new.kill_orphans() == [("left", 0, 0)]
    exited(old.wait(10.0))  # only the test's old runner may reap it
    assert _gone(pid)
    assert new.kill_orphans() == []


# ----- the warning signal (Slurm's --signal=[B:]SIG@T) -------------------------------------

# Each process writes one line to ``<dir>/<who>.<SIGNAL>`` per signal it gets. The parent (the
# rank's main process) starts a child in its own process group and says 'ready' once both trap.
_TRAP = """
import os, signal, subprocess, sys, time
d, who = {d!r}, sys.argv[1] if len(sys.argv) > 1 else "main"
def on(sig, frame):
    with open(os.path.join(d, who + "." + signal.Signals(sig).name), "a") as f:
        f.write(str(os.getpid()) + "\\n")
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGUSR2, on)
if who == "main":
    c = subprocess.Popen([sys.executable, "-c", CODE, "child"])
    while not os.path.exists(os.path.join(d, "child.ready")):
        time.sleep(0.01)
    print(os.getpid(), c.pid, flush=True)
    print("ready", flush=True)
else:
    open(os.path.join(d, "child.ready"), "w").close()
time.sleep(60)
"""


def trap_code(d: Path) -> str:
    body = _TRAP.format(d=str(d))
    return f"CODE = {body!r}\n{body}"  # the child runs the same program


def lines(p: Path) -> int:
    return len(p.read_text().splitlines()) if p.exists() else 0


def probe(d: Path, pids: dict[str, int], n: int) -> None:
    """Send SIGUSR2 to each process and wait until it has handled its ``n``-th one. A SIGUSR1
    sent before it was delivered no later (the kernel delivers the lower-numbered pending signal
    first) and Python runs pending handlers in signal-number order, so after this every SIGUSR1
    sent before the probe has left its marker: the absence of one is proof, without a sleep."""
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR2)
    for who in pids:
        wait_for(f"{who} signalled", lambda who=who: lines(d / f"{who}.SIGUSR2") >= n, 5)  # type: ignore[misc]


def start_trapping(
    runner: TaskRunner, d: Path, **kw: object
) -> tuple[tuple[str, int, int], dict[str, int]]:
    runner.launch(cmd(trap_code(d), **kw))
    key = ("j1", 0, 0)
    ready(runner, key)
    out, _ = runner.log_paths(key)
    main, child = (int(x) for x in out.read_text().split()[:2])
    return key, {"main": main, "child": child}


@pytest.mark.parametrize("batch_only", [False, True])
def test_the_warning_signal_arrives_t_seconds_before_the_limit_and_once(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path, batch_only: bool
) -> None:
    d = tmp_path / "marks"
    d.mkdir()
    _, pids = start_trapping(
        runner,
        d,
        time_limit_s=100,
        signal=signal.SIGUSR1,
        signal_before_s=30,
        signal_batch_only=batch_only,
    )
    clock.advance(69.9)
    assert runner.poll() == []
    probe(d, pids, 1)
    assert not list(d.glob("*.SIGUSR1"))  # not before limit − T
    clock.advance(0.1)
    assert runner.poll() == []  # at limit − T: sent, nothing stopped
    wait_for("main signalled", lambda: lines(d / "main.SIGUSR1") == 1, 5)
    probe(d, pids, 2)
    # the group: the rank's process and its child; B: the rank's own process only
    assert lines(d / "child.SIGUSR1") == (0 if batch_only else 1)
    assert (d / "main.SIGUSR1").read_text().split() == [str(pids["main"])]
    clock.advance(29.9)
    assert runner.poll() == []
    probe(d, pids, 3)
    assert lines(d / "main.SIGUSR1") == 1  # once per attempt
    clock.advance(0.1)
    runner.poll()  # the time limit's kill, unchanged: SIGTERM to the group
    ev = exited(runner.wait(60.0))
    assert (ev.exit_code, ev.why) == (143, "time limit (100 s) exceeded; killed by SIGTERM")
    wait_for("the child gone", lambda: _gone(pids["child"]), 5)


def test_a_limit_shorter_than_t_sends_the_warning_at_the_start(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path
) -> None:
    d = tmp_path / "marks"
    d.mkdir()
    start_trapping(runner, d, time_limit_s=20, signal=signal.SIGUSR1, signal_before_s=60)
    assert runner.poll() == []  # the first poll after the start
    wait_for(
        "both signalled",
        lambda: lines(d / "main.SIGUSR1") == 1 and lines(d / "child.SIGUSR1") == 1,
        5,
    )


def test_no_warning_without_a_signal_or_without_a_time_limit(
    runner: TaskRunner, clock: ManualClock, tmp_path: Path
) -> None:
    d = tmp_path / "marks"
    d.mkdir()
    _, pids = start_trapping(runner, d, signal=signal.SIGUSR1, signal_before_s=30)
    clock.advance(10_000)
    assert runner.poll() == []
    probe(d, pids, 1)
    assert not list(d.glob("*.SIGUSR1"))


# ----- a signal the task lives through (scancel --signal, ADR 0078) -------------------------


def test_a_signal_reaches_whom_its_scope_names_and_the_task_runs_on(
    runner: TaskRunner, tmp_path: Path
) -> None:
    """A plain rank: "steps" (scancel's default) and "full" reach its whole process group (its
    own process and its child), "batch" its own process alone; none stops it, and a task being
    stopped hears no more."""
    d = tmp_path / "marks"
    d.mkdir()
    key, pids = start_trapping(runner, d)
    assert runner.signal(key, signal.SIGUSR1, "batch")
    wait_for("main signalled", lambda: lines(d / "main.SIGUSR1") == 1, 5)
    probe(d, pids, 1)
    assert lines(d / "child.SIGUSR1") == 0  # --batch: the main process alone
    for n, scope in enumerate(("steps", "full"), start=1):
        assert runner.signal(key, signal.SIGUSR1, scope)
        wait_for(f"{scope}: the child", lambda n=n: lines(d / "child.SIGUSR1") == n, 5)  # type: ignore[misc]
    assert lines(d / "main.SIGUSR1") == 3
    assert runner.poll() == []  # it runs on
    assert not runner.signal(("j1", 0, 9), signal.SIGUSR1, "steps")  # no such task
    runner.kill(key, 5.0, "cancelled")
    assert not runner.signal(key, signal.SIGUSR1, "steps")  # being stopped
    exited(runner.wait(60.0))
