"""A restarted agent's runner adopts what the runner before it left (ADR 0031), with real
processes: a task that still runs is supervised again (its exit read from its keeper's record,
its time limit kept on the agent's clock), one that ended meanwhile is reported with the status
its keeper recorded, and after a reboot nothing is adopted. Deadlines run on a ManualClock;
only real exits are awaited, always with a bound."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpufleet.agent import bootid
from gpufleet.agent.main import _hold
from gpufleet.agent.runner import RunnerEvent, TaskRunner
from gpufleet.agent.state import AgentState
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.clock import ManualClock
from gpufleet.model.service import Probe
from support.waiting import wait_for

PY = sys.executable
KEY = ("j1", 1, 0)


def cmd(code: str, **kw: object) -> AgentCommand:
    body = {"kind": "launch", "job": "j1", "attempt": 1, "rank": 0, "command": [PY, "-c", code]}
    return AgentCommand.model_validate({**body, **kw})


def until_file(path: Path, code: int) -> str:
    return (
        f"import os, sys, time; print('ready', flush=True)\n"
        f"while not os.path.exists({str(path)!r}): time.sleep(0.02)\n"
        f"print('bye', flush=True); sys.exit({code})"
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


@pytest.fixture
def runners(tmp_path: Path, clock: ManualClock) -> Iterator[list[TaskRunner]]:
    made: list[TaskRunner] = []
    yield made
    for r in made:  # never leave a process behind
        for k in r.live():
            r.kill(k, 0, "test over")
        r.wait(5.0)


def runner(made: list[TaskRunner], tmp_path: Path, clock: ManualClock) -> TaskRunner:
    made.append(TaskRunner(tmp_path, str, clock))
    return made[-1]


def exited(events: list[RunnerEvent]) -> RunnerEvent:
    [ev] = [e for e in events if e.kind == "exited"]
    return ev


def test_a_running_task_is_adopted_and_its_exit_read_from_its_keeper(
    runners: list[TaskRunner], tmp_path: Path, clock: ManualClock
) -> None:
    old = runner(runners, tmp_path, clock)
    go = tmp_path / "go"
    assert old.launch(cmd(until_file(go, 3)))[0].kind == "started"
    out, _ = old.log_paths(KEY)
    wait_for("the task ready", lambda: b"ready" in out.read_bytes(), 10)
    new = runner(runners, tmp_path, clock)
    assert new.adopt(rebooted=False) == ({KEY: {}}, [])
    assert new.live() == [KEY] and new.poll() == []
    go.touch()
    ev = exited(new.wait(60.0))
    assert (ev.key, ev.exit_code, ev.why) == (KEY, 3, "exited with code 3")
    assert out.read_text() == "ready\nbye\n"  # one log, written on across the change
    assert not old.host.pid_path(KEY).exists()
    assert old.host.exit_path(KEY).read_text() == "3"  # until the controller has it
    new.forget_exit(KEY)
    assert not old.host.exit_path(KEY).exists()


def test_a_replicas_probes_start_again_under_the_next_agent(
    runners: list[TaskRunner], tmp_path: Path, clock: ManualClock
) -> None:
    """Its HTTP and TCP probes need only its port, which is kept; the rest of its environment
    (its secrets) never goes to disk, so a command probe is refused, saying why."""
    http = Probe.from_dict({"http": {"path": "/healthz"}}, kind="readiness").to_dict()
    live = Probe.from_dict({"command": ["true"]}, kind="liveness").to_dict()
    probes = {"readiness": http, "liveness": live}
    old = runner(runners, tmp_path, clock)
    old.launch(cmd(until_file(tmp_path / "never", 0), env={"PORT": "20123"}, probes=probes))
    pidfile = old.host.pid_path(KEY)
    assert "20123" in pidfile.read_text() and "/usr/bin" not in pidfile.read_text()  # no PATH
    new = runner(runners, tmp_path, clock)
    adopted, _ = new.adopt(rebooted=False)
    assert adopted == {KEY: probes}
    target = new.probe_target(KEY, "10.0.0.7")
    assert target is not None and target.env == {"PORT": "20123"}
    assert "agent restarts" in target.refuse_commands
    state = AgentState()
    actions = state.adopt(adopted, fence_until=200.0)
    assert [type(a).__name__ for a in actions] == ["StartProbes"]
    assert state.running()[0].job == "j1" and state.fence_until == 200.0


def test_an_adopted_task_keeps_its_time_limit_on_the_agents_clock(
    runners: list[TaskRunner], tmp_path: Path, clock: ManualClock
) -> None:
    old = runner(runners, tmp_path, clock)
    old.launch(cmd(until_file(tmp_path / "never", 0), time_limit_s=60, grace_s=0))
    out, _ = old.log_paths(KEY)
    wait_for("the task ready", lambda: b"ready" in out.read_bytes(), 10)
    clock.advance(50)
    new = runner(runners, tmp_path, clock)
    assert list(new.adopt(rebooted=False)[0]) == [KEY]
    assert new.poll() == []
    clock.advance(11)  # 61 s after its start, not after the adoption
    new.poll()
    ev = exited(new.wait(60.0))
    # no grace: SIGTERM and SIGKILL at once, whichever ends it first
    assert "time limit (60 s) exceeded" in ev.why and ev.exit_code in (128 + 9, 128 + 15), ev


def test_a_task_that_ended_while_no_agent_ran_is_reported_with_its_status(
    runners: list[TaskRunner], tmp_path: Path, clock: ManualClock
) -> None:
    old = runner(runners, tmp_path, clock)
    old.launch(cmd("import sys; sys.exit(5)"))
    keeper = psutil.Process(old._live[KEY].proc.pid)
    wait_for("its keeper gone", lambda: keeper.status() == psutil.STATUS_ZOMBIE, 10)
    assert old.host.exit_path(KEY).read_text() == "5"  # what it left before it went
    new = runner(runners, tmp_path, clock)
    assert new.adopt(rebooted=False) == ({}, [RunnerEvent("exited", KEY, 5, "exited with code 5")])
    assert not old.host.pid_path(KEY).exists() and not old.host.tmp_path(KEY).exists()


def test_after_a_reboot_nothing_is_adopted_and_each_task_is_reported_fenced(
    runners: list[TaskRunner], tmp_path: Path, clock: ManualClock
) -> None:
    old = runner(runners, tmp_path, clock)
    old.launch(cmd(until_file(tmp_path / "never", 0)))
    pid = old._live[KEY].proc.pid
    new = runner(runners, tmp_path, clock)
    keys, ended = new.adopt(rebooted=True)
    assert keys == {} and new.live() == []
    [ev] = ended
    assert ev.key == KEY and ev.why.startswith("fenced:") and "rebooted" in ev.why, ev
    assert ev.wire().cause == "fenced"  # requeued at once, not charged
    assert psutil.pid_exists(pid)  # a pid of the boot before is another process: untouched


def test_one_agent_per_data_directory(tmp_path: Path) -> None:
    first = _hold(tmp_path)
    try:
        with pytest.raises(ValueError, match="another agent runs with the data directory"):
            _hold(tmp_path, wait_s=0.0)
    finally:
        os.close(first)
    os.close(_hold(tmp_path, wait_s=0.0))  # free again once its holder let go


def test_a_reboot_is_another_boot_id_than_the_one_kept(tmp_path: Path) -> None:
    source = tmp_path / "kernel-boot-id"
    source.write_text("aaaa\n")
    first = bootid.check(tmp_path, source)
    assert not first.rebooted  # nothing kept yet: the pids alone tell
    bootid.save(tmp_path, first)
    assert not bootid.check(tmp_path, source).rebooted  # the agent alone restarted
    source.write_text("bbbb\n")
    assert bootid.check(tmp_path, source).rebooted
    assert not bootid.check(tmp_path, tmp_path / "missing").rebooted  # unknown: not a reboot


def test_a_keeper_starts_nothing_before_its_pid_file_and_dies_with_an_agent_that_wrote_none(
    tmp_path: Path,
) -> None:
    """The moment between the spawn and the pid file: an agent that dies then leaves no task
    that nobody could find (neither its watchdog nor the next agent)."""
    agent = (
        "import subprocess, sys, time; from pathlib import Path\n"
        "from gpufleet.agent.runner.argv import keeper_argv\n"
        "d = Path(sys.argv[1])\n"
        "p = subprocess.Popen([*keeper_argv(d / 'exit', d / 'pid'), 'touch', str(d / 'ran')])\n"
        "print(p.pid, flush=True); time.sleep(60)"
    )
    fake = subprocess.Popen([PY, "-c", agent, str(tmp_path)], stdout=subprocess.PIPE)
    assert fake.stdout is not None
    keeper = psutil.Process(int(fake.stdout.readline()))
    fake.kill()  # before any pid file
    fake.wait(10)

    def gone() -> bool:
        try:
            return bool(keeper.status() == psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return True

    wait_for("the keeper gone with its agent", gone, 10)
    assert not (tmp_path / "ran").exists() and not (tmp_path / "exit").exists()


def test_a_kill_before_the_command_started_is_not_lost(tmp_path: Path) -> None:
    """A cancel (SIGTERM to the task's group) that reaches the keeper while it waits for its
    pid file: the command never starts, and the keeper's record says SIGTERM (before, the
    keeper swallowed it and started the command, which then ran until the kill's SIGKILL)."""
    agent = (
        "import subprocess, sys, time; from pathlib import Path\n"
        "from gpufleet.agent.runner.argv import keeper_argv\n"
        "d = Path(sys.argv[1])\n"
        "p = subprocess.Popen([*keeper_argv(d / 'exit', d / 'pid'), 'touch', str(d / 'ran')])\n"
        "print(p.pid, flush=True); sys.stdin.readline(); print(p.wait(), flush=True)"
    )
    fake = subprocess.Popen(
        [PY, "-c", agent, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert fake.stdout is not None and fake.stdin is not None
    pid = int(fake.stdout.readline())

    def catches_sigterm() -> bool:  # its handlers are in place: it waits for its pid file
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (15 - 1)))
        return False

    wait_for("the keeper waiting for its pid file", catches_sigterm, 10)
    os.kill(pid, 15)
    (tmp_path / "pid").write_text(str(pid))
    fake.stdin.write("\n")
    fake.stdin.flush()
    assert int(fake.stdout.readline()) == -15  # the keeper died of it
    fake.wait(10)
    assert (tmp_path / "exit").read_text() == "-15"
    assert not (tmp_path / "ran").exists()


def test_without_pidfds_a_task_is_adopted_by_its_pid_and_create_time(
    runners: list[TaskRunner], tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux before 5.3 has no pidfd_open: the task is still adopted, its end seen by psutil."""
    old = runner(runners, tmp_path, clock)
    go = tmp_path / "go"
    old.launch(cmd(until_file(go, 4)))
    out, _ = old.log_paths(KEY)
    wait_for("the task ready", lambda: b"ready" in out.read_bytes(), 10)
    monkeypatch.delattr(os, "pidfd_open")
    new = runner(runners, tmp_path, clock)
    assert list(new.adopt(rebooted=False)[0]) == [KEY] and new.poll() == []
    go.touch()
    assert exited(new.wait(60.0)).exit_code == 4


def test_an_adopted_task_s_metrics_file_is_read_on_and_at_its_end(
    runners: list[TaskRunner], tmp_path: Path, clock: ManualClock
) -> None:
    """The metrics file (ADR 0049) is kept in the pid file's record: the next agent reads it,
    the task's account known from its private directory's owner."""
    old = runner(runners, tmp_path, clock)
    go = tmp_path / "go"
    code = (
        "import os, time\n"
        "open(os.environ['GPUFLEET_METRICS_FILE'], 'w').write('fps 30\\n')\n"
        f"print('ready', flush=True)\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "open(os.environ['GPUFLEET_METRICS_FILE'], 'w').write('fps 31\\n')\n"
    )
    old.launch(cmd(code))
    out, _ = old.log_paths(KEY)
    wait_for("the task ready", lambda: b"ready" in out.read_bytes(), 10)
    new = runner(runners, tmp_path, clock)
    new.adopt(rebooted=False)
    [first] = [e for e in new.poll() if e.kind == "metrics"]
    assert first.metrics == (("fps", 30.0),)
    go.touch()
    evs = new.wait(60.0)
    [last] = [e for e in evs if e.kind == "metrics"]
    assert last.metrics == (("fps", 31.0),) and exited(evs).exit_code == 0
