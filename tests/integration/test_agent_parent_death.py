"""A task dies with its agent: a SIGKILLed agent leaves nothing running unsupervised."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

AGENT_LIKE = r"""
import sys, time
from pathlib import Path
from gpufleet.agent.runner import TaskRunner
from gpufleet.api.schemas import AgentCommand
r = TaskRunner(Path(sys.argv[1]), lambda gpus: ",".join(map(str, gpus)))
r.launch(AgentCommand(kind="launch", job="7", attempt=1, rank=0, run_as=sys.argv[2],
                      command=[sys.argv[3], "-c", "import time; time.sleep(120)"]))
print("launched", flush=True)
time.sleep(120)
"""


def _account(name: str) -> str:
    try:
        pwd.getpwnam(name)
    except KeyError:
        pytest.skip(f"no Unix account {name!r} on this machine")
    return name


@pytest.mark.requires("setpriv")
@pytest.mark.parametrize("as_owner", [False, True], ids=["agents-account", "owners-account"])
def test_a_task_dies_when_its_agent_is_killed(tmp_path: Path, as_owner: bool) -> None:
    """Also a task switched to its owner's account: the kernel clears the parent-death signal
    on a change of uid, so it must be armed again after the switch."""
    run_as = ""
    if as_owner:
        if os.geteuid() != 0:
            pytest.skip("only a root agent runs a task as its owner's account")
        run_as = _account("nobody")
    # the interpreter itself, not a virtual environment's link to it: a clone under /tmp (as CI
    # makes one) is hidden from a task run as its owner, which has a private /tmp
    python = os.path.realpath(sys.executable)
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT_LIKE, str(tmp_path), run_as, python],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().strip() == "launched"
        pid = int(json.loads((tmp_path / "7" / "1" / "rank0.pid").read_text())["pid"])
        task = psutil.Process(pid)
        assert task.is_running()
        # setpriv arms the signal, then execs the command: kill only once that has happened
        deadline = time.monotonic() + 10
        while task.cmdline()[:1] != [python] and time.monotonic() < deadline:
            time.sleep(0.01)
        if as_owner:
            assert task.uids().real == pwd.getpwnam(run_as).pw_uid
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
        # the kernel delivers SIGKILL to the orphaned task; wait for it to be gone (bounded)
        gone, _ = psutil.wait_procs([task], timeout=10)
        assert gone, "the task outlived its agent"
    finally:
        err = tmp_path / "7" / "1" / "rank0.err"  # what the task said, if it ended early
        if err.exists():
            print(f"--- the task's stderr\n{err.read_text(errors='replace')}")
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=10)
