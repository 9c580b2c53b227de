"""The fencing watchdog as a real process: this test plays the agent (it starts the watchdog
and the tasks, and writes the lease), and real tasks die, or live, by the watchdog's rule."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpufleet.agent.runner import Key, RunnerEvent, TaskRunner
from gpufleet.agent.runner.exits import fenced_by_watchdog
from gpufleet.agent.watchdog import WatchdogHandle, fenced_mark
from gpufleet.api.schemas import AgentCommand


def launch(runner: TaskRunner, job: str) -> tuple[Key, psutil.Process, Path]:
    cmd = AgentCommand(
        kind="launch",
        job=job,
        attempt=1,
        rank=0,
        command=[sys.executable, "-c", "import time; time.sleep(120)"],
    )
    (ev,) = runner.launch(cmd)
    assert ev.kind == "started", ev
    out, _ = runner.log_paths(ev.key)
    pidfile = out.with_name("rank0.pid")
    pid = int(json.loads(pidfile.read_text())["pid"])
    return ev.key, psutil.Process(pid), pidfile


Node = tuple[WatchdogHandle, TaskRunner]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    wd = WatchdogHandle(tmp_path)
    wd.start()
    runner = TaskRunner(tmp_path, lambda gpus: ",".join(map(str, gpus)))
    try:
        yield wd, runner
    finally:
        wd.stop()
        for key in runner.live():
            runner.kill(key, 0, "test over")
        runner.wait(10)


def test_a_lapsed_lease_kills_the_task_and_marks_it_fenced(node: Node) -> None:
    wd, runner = node
    key, _, pidfile = launch(runner, "j1")
    wd.renew(time.monotonic() + 0.5, 0.5)  # then no renewal: as if the agent hung
    evs = runner.wait(15)  # reaps (as the agent would) what the watchdog killed
    assert [e.key for e in evs] == [key], "the watchdog did not kill the task of a lapsed lease"
    mark = fenced_mark(pidfile)
    assert mark is not None and mark.startswith("fenced:")
    # the agent, once awake, reports the exit as fencing: the controller requeues the job
    (said,) = evs
    assert said.why.startswith("fenced:") and "killed by" in said.why, said


def test_a_held_lease_and_a_clean_stop_kill_nothing(node: Node) -> None:
    wd, runner = node
    _, task, pidfile = launch(runner, "j2")
    wd.renew(time.monotonic() + 60, 0.5)
    time.sleep(1.0)  # several watchdog steps
    assert task.is_running()
    proc = wd.proc
    wd.stop()  # the agent shuts down cleanly: the watchdog exits and kills nothing
    assert proc is not None and proc.returncode == 0
    wd.renew(time.monotonic() - 1, 0.0)  # even a lapsed lease now: nobody enforces it
    time.sleep(0.5)
    assert task.is_running() and fenced_mark(pidfile) is None


def test_when_the_agent_is_gone_the_watchdog_enforces_its_lease_then_exits(node: Node) -> None:
    wd, runner = node
    key, _, _ = launch(runner, "j3")
    wd.renew(time.monotonic() + 0.3, 0.3)
    proc = wd.proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # end of file without "stop": the agent died
    assert [e.key for e in runner.wait(15)] == [key]
    assert proc.wait(timeout=15) == 0


def test_a_killed_watchdog_is_started_again(node: Node) -> None:
    wd, _ = node
    assert not wd.ensure()
    assert wd.proc is not None
    wd.proc.kill()
    wd.proc.wait(timeout=10)
    assert wd.ensure() and wd.restarts == 1 and wd.proc.poll() is None


def test_the_fenced_mark_is_only_added_to_an_exit_the_watchdog_caused(tmp_path: Path) -> None:
    ev = RunnerEvent("exited", ("j", 1, 0), 143, "killed by SIGTERM")
    assert fenced_by_watchdog(ev, tmp_path / "rank0.pid") == ev


def test_the_watchdog_of_a_dead_agent_gives_way_to_the_next_agent(tmp_path: Path) -> None:
    old = WatchdogHandle(tmp_path)
    old.start()
    old.renew(time.monotonic() + 60, 0.5)  # the dead agent's lease still runs
    proc = old.proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # the agent died
    # a new agent takes the node over (another process writes the lease)
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from gpufleet.agent.watchdog import write_lease; "
            "write_lease(Path(sys.argv[1]), time.monotonic() + 60, 0.5)",
            str(tmp_path),
        ],
        check=True,
    )
    assert proc.wait(timeout=15) == 0  # it does not linger beside the new agent's watchdog
