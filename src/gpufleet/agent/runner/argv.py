"""The command lines the runner builds around a task's own: taskstart in front of it (the
working directory and the batch script's files, opened as the task's user), the step daemon a
batch job's other ranks run, and whether a program can run at all (said as Popen would)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from gpufleet.agent import keeper, taskstart
from gpufleet.agent.accounts import Account
from gpufleet.api.schemas import AgentCommand

# what a batch job's other ranks run (see gpufleet.slurm.stepd), with the agent's interpreter
STEP_DAEMON = (sys.executable, "-I", "-m", "gpufleet.slurm.stepd")
TASKSTART = taskstart.__file__
KEEPER = keeper.__file__


def keeper_argv(exit_file: Path, pidfile: Path) -> list[str]:
    """What runs in front of every task, the leader of its group: it starts the task once the
    agent has written ``pidfile``, outlives the agent, and records the task's exit status in
    ``exit_file`` (see agent/keeper.py). Run as a file, isolated, without site: a few ms."""
    agent = str(os.getpid())
    return [sys.executable, "-I", "-S", KEEPER, str(exit_file), str(pidfile), agent, "--"]


def taskstart_argv(
    cmd: AgentCommand,
    command: list[str],
    who: Account | None = None,
    pass_fds: Sequence[int] = (),
) -> list[str]:
    """``command`` behind taskstart, which enters the working directory and opens the batch
    script's output files as the task's user. Run as a file (it imports only the standard
    library: importing the gpufleet.agent package would cost a task ~0.6 s to start),
    isolated (-I: the job's PYTHON* variables are not the agent's interpreter's). ``who``:
    taskstart runs as root and opens them with this account's effective ids (the command is
    a root container runtime); ``pass_fds``: what the command inherits."""
    config: dict[str, object] = {
        "workdir": cmd.workdir,
        "output": cmd.output,
        "error": cmd.error,
        "append": cmd.append,
        "input": cmd.input,
    }
    if who is not None:
        config["as"] = {"name": who.name, "uid": who.uid, "gid": who.gid}
    if pass_fds:
        config["pass_fds"] = list(pass_fds)
    return [sys.executable, "-I", TASKSTART, json.dumps(config), "--", *command]


def unrunnable(program: str, path: str | None, cwd: str) -> OSError | None:
    """The error Popen would raise for ``program``, or None when it can be executed."""
    target = program if "/" not in program else str(Path(cwd, program))
    if shutil.which(target, path=path) is not None:
        return None
    if "/" in program and Path(target).exists():
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
