"""A task outlives its agent, never its supervision (ADR 0031): with the node's watchdog alive, a
SIGKILLed agent's task runs on until the lease the watchdog enforces ends, and is killed then;
with neither the agent nor a watchdog alive (a bare TaskRunner killed, or the agent and its
watchdog both), the task's keeper kills it. Nothing runs unsupervised forever."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from gpufleet.agent.keeper import UNSUPERVISED
from gpufleet.agent.watchdog import fenced_mark, read_lease
from support.waiting import wait_for

AGENT_LIKE = r"""
import sys, time
from pathlib import Path
from gpufleet.agent.runner import TaskRunner
from gpufleet.agent.watchdog import WatchdogHandle
from gpufleet.api.schemas import AgentCommand
data, run_as, python, lease_s = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
until = 0.0
if lease_s > 0:  # as the agent: its watchdog, and the lease it enforces
    wd = WatchdogHandle(data)
    wd.start()
    until = time.monotonic() + lease_s
    wd.renew(until, 0.5)
r = TaskRunner(data, lambda gpus: ",".join(map(str, gpus)))
r.launch(AgentCommand(kind="launch", job="7", attempt=1, rank=0, run_as=run_as,
                      command=[python, "-c", "import time; time.sleep(120)"]))
print("launched", until, flush=True)
time.sleep(120)
"""
# the lease the agent-like process leaves its watchdog: long enough to see the task run on
LEASE_S = 6.0


@dataclass
class Node:
    agent: subprocess.Popen[str]
    keeper: psutil.Process  # what the pid file names: the task's group leader
    task: psutil.Process  # the keeper's child: the command
    pidfile: Path
    until: float  # the lease's end (CLOCK_MONOTONIC; 0: no watchdog)


def _account(name: str) -> str:
    try:
        pwd.getpwnam(name)
    except KeyError:
        pytest.skip(f"no Unix account {name!r} on this machine")
    return name


@contextlib.contextmanager
def agent_like(tmp_path: Path, run_as: str, lease_s: float) -> Iterator[Node]:
    # the interpreter itself, not a virtual environment's link to it: a clone under /tmp (as CI
    # makes one) is hidden from a task run as its owner, which has a private /tmp
    python = os.path.realpath(sys.executable)
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT_LIKE, str(tmp_path), run_as, python, str(lease_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    pidfile = tmp_path / "7" / "1" / "rank0.pid"
    keeper = None
    try:
        assert agent.stdout is not None
        word, until = agent.stdout.readline().split()
        assert word == "launched"
        keeper = psutil.Process(int(json.loads(pidfile.read_text())["pid"]))
        # the keeper forks the task, setpriv arms its parent-death signal and execs the command
        task = wait_for("the task", lambda: _command(keeper, python), 10)
        yield Node(agent, keeper, task, pidfile, float(until))
    finally:
        err = pidfile.with_name("rank0.err")  # what the task said, if it ended early
        if err.exists():
            print(f"--- the task's stderr\n{err.read_text(errors='replace')}")
        if agent.poll() is None:
            agent.kill()
        agent.wait(timeout=10)
        if keeper is not None and _running(keeper):  # the test failed: leave nothing
            with contextlib.suppress(OSError):
                os.killpg(keeper.pid, signal.SIGKILL)


def _command(keeper: psutil.Process, python: str) -> psutil.Process | None:
    with contextlib.suppress(psutil.Error):
        for c in keeper.children():
            if c.cmdline()[:1] == [python]:
                return c
    return None


def _watchdog(data: Path) -> psutil.Process:
    lease = json.loads((data / "lease.json").read_text())
    return psutil.Process(int(lease["watchdog"]))


def _running(p: psutil.Process) -> bool:
    """Not exited (a zombie has: an orphan's init may be slow to reap, or never)."""
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _gone(*procs: psutil.Process, timeout_s: float = 15) -> None:
    wait_for(f"{procs} gone", lambda: not any(_running(p) for p in procs), timeout_s)


@pytest.mark.requires("setpriv")
@pytest.mark.parametrize("as_owner", [False, True], ids=["agents-account", "owners-account"])
def test_without_a_watchdog_the_keeper_kills_the_task_of_a_killed_agent(
    tmp_path: Path, as_owner: bool
) -> None:
    """A bare TaskRunner (no watchdog, no lease file): once its agent is SIGKILLed nobody could
    fence or adopt the task, so its keeper kills it (its group). Also a task switched to its
    owner's account (the keeper, root, stays the agent's)."""
    run_as = ""
    if as_owner:
        if os.geteuid() != 0:
            pytest.skip("only a root agent runs a task as its owner's account")
        run_as = _account("nobody")
    with agent_like(tmp_path, run_as, 0.0) as node:
        if as_owner:
            assert node.task.uids().real == pwd.getpwnam(run_as).pw_uid
        assert read_lease(tmp_path) is None
        os.kill(node.agent.pid, signal.SIGKILL)
        node.agent.wait(timeout=10)
        _gone(node.task, node.keeper)
        assert fenced_mark(node.pidfile) == UNSUPERVISED  # a later agent reports it fenced


@pytest.mark.requires("setpriv")
def test_a_killed_agents_task_runs_on_until_its_watchdog_fences_it_at_the_lease_end(
    tmp_path: Path,
) -> None:
    with agent_like(tmp_path, "", LEASE_S) as node:
        watchdog = _watchdog(tmp_path)
        os.kill(node.agent.pid, signal.SIGKILL)
        node.agent.wait(timeout=10)
        assert time.monotonic() < node.until, "the test was too slow to see the lease run"
        # the keeper sees the watchdog alive: the task runs on under the lease
        assert _running(node.task) and _running(node.keeper)
        _gone(node.task, node.keeper, timeout_s=LEASE_S + 15)
        assert time.monotonic() >= node.until, "the task died before its lease ended"
        mark = fenced_mark(node.pidfile)
        assert mark is not None and "none took it over within the lease" in mark, mark
        _gone(watchdog)  # it exits once nothing it fenced is alive


@pytest.mark.requires("setpriv")
def test_the_keeper_kills_the_task_once_the_agent_and_its_watchdog_are_both_dead(
    tmp_path: Path,
) -> None:
    with agent_like(tmp_path, "", 120.0) as node:  # a lease far off: only the keeper acts
        watchdog = _watchdog(tmp_path)
        os.kill(node.agent.pid, signal.SIGKILL)
        node.agent.wait(timeout=10)
        watchdog.kill()
        _gone(watchdog)
        _gone(node.task, node.keeper)
        assert fenced_mark(node.pidfile) == UNSUPERVISED
