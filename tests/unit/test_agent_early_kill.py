"""A cancel that reaches a task while it is still being started, with real processes: the
SIGTERM to its group is never lost, never sent twice, and never replaced by a SIGKILL.

A task is the keeper (its group's leader), then taskstart in front of a batch script with
output files, then the script. Each of them starts its child with a fork, and a fork does not
inherit what is pending for its parent: a kill that reaches the group just before a fork is its
parent's alone. Before, taskstart ignored it (its handlers were in place, its child not yet
spawned): the script ran on, its SIGTERM trap never ran, and the kill's SIGKILL ended it after
the grace. The moments are injected, not waited for: a harness holds the process at that point
(before the spawn, in the child before its exec, in the keeper after its fork) until the test
has sent the group its SIGTERM."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.agent.runner import TaskRunner
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.clock import ManualClock

PY = sys.executable
BOUND_S = 30.0  # bounds a wait that went wrong; never asserted on

# taskstart run as the keeper runs it, held where argv[3] says: "spawn" (its kills' handlers
# in place, the script not yet forked) or "child" (forked, before its exec)
TASKSTART_HELD = """
import os, subprocess, sys
from gpufleet.agent import taskstart
notify, go, where = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
real = subprocess.Popen
def hold():
    os.write(notify, b"x")
    os.read(go, 1)
def popen(*a, **kw):
    if where == "spawn":
        hold()
    else:
        pre = kw["preexec_fn"]
        def held():
            hold()
            pre()
        kw["preexec_fn"] = held
    return real(*a, **kw)
subprocess.Popen = popen
sys.exit(taskstart.main(sys.argv[4:]))
"""

# the keeper, held right after its fork (in the keeper, not in the command's process); it says
# "w" once it waits for the command, past what it does with a kill that came meanwhile
KEEPER_HELD = """
import os, sys
from gpufleet.agent import keeper
notify, go = int(sys.argv[1]), int(sys.argv[2])
real_fork, real_waitpid = os.fork, os.waitpid
def fork():
    pid = real_fork()
    if pid:
        os.write(notify, b"x")
        os.read(go, 1)
    return pid
def waitpid(*a):
    os.write(notify, b"w")
    return real_waitpid(*a)
os.fork, os.waitpid = fork, waitpid
sys.exit(keeper.run(sys.argv[3], sys.argv[4:]))
"""

# a program that counts the SIGTERMs it gets, each one line, until a line on its stdin
COUNTS_TERMS = (
    "import signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *_: print('TERM', flush=True))\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
)


def read_byte(fd: int) -> bytes:
    ready, _, _ = select.select([fd], [], [], BOUND_S)
    assert ready, "the harness never reached its point"
    return os.read(fd, 1)


class Held:
    """A harness process in a session (and process group) of its own, the leader of it as the
    keeper is of a task's, held at its point until ``release``."""

    def __init__(self, code: str, args: list[str], **kw: object) -> None:
        self.notify_r, notify_w = os.pipe()
        go_r, self.go_w = os.pipe()
        self.proc = subprocess.Popen(
            [PY, "-c", code, str(notify_w), str(go_r), *args],
            pass_fds=(notify_w, go_r),
            start_new_session=True,
            **kw,  # type: ignore[call-overload]
        )
        os.close(notify_w)
        os.close(go_r)

    def reached(self) -> bytes:
        return read_byte(self.notify_r)

    def cancel(self) -> None:
        """A cancel's SIGTERM to the task's group, as the runner sends it."""
        os.killpg(self.proc.pid, signal.SIGTERM)

    def release(self) -> None:
        os.write(self.go_w, b"x")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(BOUND_S)
        os.close(self.notify_r)
        os.close(self.go_w)


@pytest.fixture
def held() -> Iterator[list[Held]]:
    made: list[Held] = []
    yield made
    for h in made:  # never leave a process behind
        h.close()


@pytest.mark.parametrize("where", ["spawn", "child"])
def test_a_cancel_while_taskstart_spawns_the_script_ends_it_before_the_script_runs(
    held: list[Held], tmp_path: Path, where: str
) -> None:
    """At the spawn (the kill pending for taskstart alone) or in the script's process before
    its exec (pending there too): the script never runs, taskstart ends by the SIGTERM (the
    task's exit says so), and nothing waits for a SIGKILL."""
    ran = tmp_path / "ran"
    config = json.dumps({"workdir": str(tmp_path), "output": str(tmp_path / "o.txt")})
    script = ["sh", "-c", f"touch {ran}"]
    h = Held(TASKSTART_HELD, [where, config, "--", *script], stdout=subprocess.DEVNULL)
    held.append(h)
    h.reached()
    h.cancel()
    h.release()
    assert h.proc.wait(BOUND_S) == -signal.SIGTERM
    assert not ran.exists()  # before: the script ran, the SIGTERM swallowed by taskstart


def test_a_cancel_while_the_keeper_forks_reaches_the_command_once(
    held: list[Held], tmp_path: Path
) -> None:
    """The keeper held after its fork while its command starts and installs its handler: the
    group's SIGTERM reaches the command once (before, the keeper forwarded the SIGTERM pending
    for it too, and a batch script's trap ran twice)."""
    h = Held(
        KEEPER_HELD,
        [str(tmp_path / "exit"), PY, "-c", COUNTS_TERMS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    held.append(h)
    assert h.proc.stdout is not None and h.proc.stdin is not None
    assert h.reached() == b"x"
    assert h.proc.stdout.readline() == b"ready\n"  # its handler is in place
    h.cancel()
    h.release()
    assert h.reached() == b"w"  # the keeper is past what it does with the pending kill
    h.proc.stdin.write(b"bye\n")
    h.proc.stdin.flush()
    assert h.proc.wait(BOUND_S) == 0
    assert h.proc.stdout.read() == b"TERM\n"
    assert (tmp_path / "exit").read_text() == "0"


def test_a_cancel_at_once_after_the_launch_ends_the_task_by_sigterm(tmp_path: Path) -> None:
    """The runner's kill right after its launch (the keeper, taskstart, the script: none of
    them ready yet): the task ends by the SIGTERM, on a clock that never reaches the grace's
    SIGKILL."""
    runner = TaskRunner(tmp_path / "agent", lambda gpus: "", ManualClock(100.0))
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrap 'echo TERM; exit 7' TERM\necho started\nsleep 60 & wait\n")
    script.chmod(0o755)
    c = AgentCommand.model_validate(
        {
            "kind": "launch",
            "job": "b1",
            "attempt": 1,
            "rank": 0,
            "command": [str(script)],
            "role": "batch",
            "workdir": str(tmp_path),
            "output": "o.txt",
        }
    )
    assert runner.launch(c)[0].kind == "started"
    assert runner.kill(("b1", 1, 0), 30.0, "cancelled")
    [ev] = [e for e in runner.wait(BOUND_S) if e.kind == "exited"]
    out = (tmp_path / "o.txt").read_text() if (tmp_path / "o.txt").exists() else ""
    # before its trap (or before it ran at all) it dies of the SIGTERM; after, its trap runs
    assert (ev.exit_code, out) in ((143, ""), (143, "started\n"), (7, "started\nTERM\n"))
