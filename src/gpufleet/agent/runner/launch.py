"""Starting one rank: refuse what must not run, resolve its account, prepare its directories and
private /tmp, build its command line and environment (bare, or through ``in_container``), open
its logs and start it in a process group of its own, then record it (``LiveTask``) with the pid
file a restarted agent finds it by."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpufleet.agent import sandbox, secrets
from gpufleet.agent.accounts import Account, resolve
from gpufleet.agent.runner.adopt import record
from gpufleet.agent.runner.argv import STEP_DAEMON, keeper_argv, taskstart_argv, unrunnable
from gpufleet.agent.runner.in_container import CHECKPOINT_MOUNT, ContainerLaunch, Containers
from gpufleet.agent.runner.process import LiveTask, signal_group, write_pidfile
from gpufleet.agent.runner.taskhost import TaskHost
from gpufleet.agent.taskenv import check_no_nul, task_env, with_step_commands
from gpufleet.agent.tasks import (
    EXIT_NOT_EXECUTABLE,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    Key,
    LatestAttempts,
    RunnerEvent,
)
from gpufleet.api.schemas import AgentCommand
from gpufleet.model.jobmetrics import METRICS_ENV

log = logging.getLogger(__name__)

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # becomes a directory name


def refusal(cmd: AgentCommand, latest: LatestAttempts) -> str | None:
    """Why ``cmd`` must not run at all (None: it may be tried)."""
    if not _SAFE_ID.match(cmd.job):
        return f"refused: bad job id {cmd.job!r}"
    newest = latest.get(cmd.job)
    if newest is not None and cmd.attempt < newest:
        # a stale attempt never runs: the job has moved on to a newer one here
        return f"refused: stale attempt {cmd.attempt} (this node ran attempt {newest})"
    if not cmd.command and cmd.role != "step":
        return "refused: empty command"
    return None


@dataclass(frozen=True)
class _Plan:
    """What runs: the command line, its process environment, the job's own environment with
    its delivered secrets, and the container launch when it runs in one."""

    argv: list[str]
    env: dict[str, str]
    launch_env: dict[str, str]
    container: ContainerLaunch | None = None


class Launcher:
    def __init__(self, host: TaskHost, containers: Containers) -> None:
        self.host = host
        self.containers = containers

    def start(self, cmd: AgentCommand, key: Key, now: float) -> tuple[RunnerEvent, LiveTask | None]:
        """The task started (its event and its record), or its exit when it could not be
        spawned; raises what stops the launch before that (LaunchRefused and the like)."""
        host = self.host
        account = resolve(cmd.run_as, cmd.fallback_account, as_root=host.as_root, agent=host.agent)
        command = list(STEP_DAEMON) if cmd.role == "step" else list(cmd.command)
        check_no_nul({}, command)
        check_no_nul({}, [cmd.workdir, cmd.output, cmd.error, cmd.input])
        out_path, _ = host.log_paths(key)
        sandbox.private_dir(out_path.parent.parent)  # the agent's own: never the task's
        sandbox.private_dir(out_path.parent)
        tmp = host.tmp_path(key)
        sandbox.fresh_tmp(tmp, account)
        ckpt = checkpoint_path(cmd, account, out_path.parent.parent)  # on the node
        if ckpt and _in_image(cmd) and not Path(ckpt).parent.is_dir():
            ckpt = ""  # no directory on the node to mount (an image job's workdir may be none)
        if ckpt:  # a container sees it where its directory is mounted (``in_container``)
            seen = in_image_checkpoint(ckpt) if _in_image(cmd) else ckpt
            cmd = cmd.model_copy(update={"env": {**cmd.env, CHECKPOINT_ENV: seen}})
        if reports_metrics(cmd):  # in its TMPDIR, which a container sees at /tmp
            inside = "/tmp" if cmd.container is not None else str(tmp)
            mfile = f"{inside}/{METRICS_FILE}"
            cmd = cmd.model_copy(update={"env": {**cmd.env, METRICS_ENV: mfile}})
        plan = self._plan(cmd, key, account, command, tmp, ckpt)
        cwd = self._cwd(cmd, plan, account, tmp, out_path)
        proc = self._spawn(cmd, key, command, plan, account, cwd, tmp)
        if isinstance(proc, RunnerEvent):
            return proc, None
        task = self._record(cmd, key, proc, plan, account, tmp, cwd, now, ckpt)
        log.info("started %s/%d rank %d as %s: pid %d", *key, account.name, proc.pid)
        return RunnerEvent("started", key), task

    def _plan(
        self,
        cmd: AgentCommand,
        key: Key,
        account: Account,
        command: list[str],
        tmp: Path,
        ckpt: str = "",
    ) -> _Plan:
        # a batch job's other ranks run gpufleet's step daemon, on the node as slurmstepd does:
        # never in the job's image, which has no gpufleet
        if _in_image(cmd):
            # the task's /tmp is its directory in the container too: file secrets land there
            launch_env = {**cmd.env, **secrets.deliver(cmd.secrets, tmp, "/tmp", account)}
            where = str(Path(ckpt).parent) if ckpt else ""
            ctr = self.containers.launch(cmd, key, account, tmp, launch_env, where)
            return _Plan(ctr.argv, ctr.env, launch_env, ctr)
        host = self.host
        wrapped = taskstart_argv(cmd, command) if _helped(cmd) else command
        argv, tmpdir = sandbox.wrap(wrapped, account, tmp)
        launch_env = {**cmd.env, **secrets.deliver(cmd.secrets, tmp, tmpdir, account)}
        visible = host.visible_devices(cmd.batch_gpus or cmd.gpus)
        env = task_env(account, tmpdir, host.node_env, launch_env, visible, cmd.user_env)
        env.update(host.sharing.task_env(len(cmd.gpus), cmd.gpu_milli, tuple(cmd.gpus)))
        if unbounded := host.sharing.note(len(cmd.gpus), cmd.gpu_milli):
            log.info("%s/%d rank %d: %s", *key, unbounded)
        with_step_commands(env, host.step_bin)
        return _Plan(argv, env, launch_env)

    @staticmethod
    def _cwd(cmd: AgentCommand, plan: _Plan, account: Account, tmp: Path, out: Path) -> str:
        if plan.container is not None:
            return str(tmp)  # the runtime's; the task's is the container's workdir
        if _helped(cmd):  # taskstart enters the working directory as the task's user, not root
            return "/"
        if sandbox.switches(account):  # as a login does; the agent's directory is not its
            return account.home if Path(account.home).is_dir() else str(tmp)
        return str(out.parent)

    def _spawn(
        self,
        cmd: AgentCommand,
        key: Key,
        command: list[str],
        plan: _Plan,
        account: Account,
        cwd: str,
        tmp: Path,
    ) -> subprocess.Popen[bytes] | RunnerEvent:
        """The task's process, its output to its logs (the exit when it cannot start)."""
        ctr = plan.container
        env_fd = ctr.env_fd if ctr is not None else None
        out_path, err_path = self.host.log_paths(key)
        try:
            out_fd = sandbox.open_log(out_path, account)
        except BaseException:
            _close(env_fd)
            raise
        try:
            err_fd = sandbox.open_log(err_path, account)
        except BaseException:
            os.close(out_fd)
            _close(env_fd)
            raise
        with open(out_fd, "ab") as out, open(err_fd, "ab") as err:
            where = cmd.workdir if cmd.workdir and Path(cmd.workdir).is_dir() else cwd
            # the keeper runs it: say here what Popen would have said
            missing = unrunnable(command[0], plan.env.get("PATH"), where) if ctr is None else None
            if missing is not None:  # say so as Popen would, not as setpriv's exit 127
                sandbox.remove_tree(tmp)
                return spawn_failed(key, command, missing, err)
            on_stdin = ctr is not None and ctr.env_on_stdin
            exit_file, pidfile = self.host.exit_path(key), self.host.pid_path(key)
            exit_file.unlink(missing_ok=True)
            pidfile.unlink(missing_ok=True)  # the keeper starts the task once we wrote it
            try:
                return subprocess.Popen(
                    [*keeper_argv(exit_file, pidfile), *plan.argv],
                    # a container's environment: an unlinked file the runtime reads as its
                    # stdin (--env-file /dev/stdin) or, behind taskstart, as /dev/fd/N; never
                    # a value on a command line
                    stdin=env_fd if env_fd is not None and on_stdin else subprocess.DEVNULL,
                    pass_fds=(env_fd,) if env_fd is not None and not on_stdin else (),
                    stdout=out,
                    stderr=err,
                    env=plan.env,
                    cwd=cwd,
                    start_new_session=True,  # its own process group: a kill reaches its children
                    close_fds=True,
                )
            except OSError as e:
                sandbox.remove_tree(tmp)
                return spawn_failed(key, command, e, err)
            finally:
                _close(env_fd)

    def _record(
        self,
        cmd: AgentCommand,
        key: Key,
        proc: subprocess.Popen[bytes],
        plan: _Plan,
        account: Account,
        tmp: Path,
        cwd: str,
        now: float,
        ckpt: str = "",
    ) -> LiveTask:
        pidfile = self.host.pid_path(key)
        name = plan.container.name if plan.container is not None else ""
        task = LiveTask(
            key=key,
            proc=proc,
            started_at=now,
            time_limit_s=cmd.time_limit_s,
            grace_s=cmd.grace_s,
            gpus=tuple(cmd.gpus),
            gpu_milli=cmd.gpu_milli,
            pidfile=pidfile,
            tmp=tmp,
            warn_signal=cmd.signal,
            warn_before_s=cmd.signal_before_s,
            warn_batch_only=cmd.signal_batch_only,
            behind_copier=bool(cmd.output),
            container=name,
            account=account,
            # in a container, env is the runtime's own: its probes need only the port
            env=plan.env if not name else {k: v for k, v in plan.launch_env.items() if k == "PORT"},
            cwd=cwd,
            probes=dict(cmd.probes),
            role=cmd.role,
            checkpoint=ckpt,  # on the node, where the agent looks (a container's is mounted)
            metrics=str(tmp / METRICS_FILE) if reports_metrics(cmd) else "",  # on the host
        )
        try:
            write_pidfile(pidfile, proc.pid, self.containers.cleanup_argv(name), record(task))
        except BaseException:  # it must not run on unsupervised
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
            raise
        return task


CHECKPOINT_ENV = "GPUFLEET_CHECKPOINT_FILE"
METRICS_FILE = "gpufleet.metrics"  # in the task's private temporary directory


def reports_metrics(cmd: AgentCommand) -> bool:
    """Whether the task is told a metrics file (ADR 0049): rank 0 of a job, not a step
    daemon."""
    return cmd.rank == 0 and cmd.role != "step"


def _in_image(cmd: AgentCommand) -> bool:
    """The task runs in its image (a batch job's step daemons run on the node)."""
    return cmd.container is not None and cmd.role != "step"


def in_image_checkpoint(path: str) -> str:
    """The checkpoint file as a container sees it: its directory on the node is mounted on
    ``CHECKPOINT_MOUNT`` (a directory, so that a job may write a temporary file and rename it
    over the checkpoint, as the DDP example does: a file mounted alone could not be renamed
    over)."""
    return f"{CHECKPOINT_MOUNT}/{Path(path).name}"


def checkpoint_path(cmd: AgentCommand, account: Account, job_dir: Path) -> str:
    """Where the job's checkpoint file is on the node, the same for every attempt: in its
    working directory (the submit directory: shared, as Slurm assumes); without one, in the
    job's directory on this node when the task runs as the agent's account, else in its home.
    A container's is mounted (``in_image_checkpoint``). "": none."""
    name = cmd.checkpoint_file
    if not name or "/" in name:
        return ""
    if cmd.workdir:
        return str(Path(cmd.workdir) / name)
    if not sandbox.switches(account):
        return str(job_dir / name)
    return str(Path(account.home) / name)


def note(host: TaskHost, key: Key, why: str) -> None:
    """The reason a task did not start, in its stderr log (best effort: the disk may be what
    failed)."""
    _, err_path = host.log_paths(key)
    try:
        sandbox.private_dir(err_path.parent.parent)
        sandbox.private_dir(err_path.parent)
        fd = sandbox.open_log(err_path, None)
        with open(fd, "ab") as err:
            err.write(f"gpufleet-agent: {why}\n".encode(errors="replace"))
    except Exception as e:
        log.warning("could not write the reason to %s: %s", err_path, e)


def spawn_failed(key: Key, command: list[str], e: OSError, err: IO[bytes]) -> RunnerEvent:
    code = (
        EXIT_NOT_FOUND
        if isinstance(e, FileNotFoundError)
        else EXIT_NOT_EXECUTABLE
        if isinstance(e, PermissionError)
        else EXIT_REFUSED
    )
    why = f"cannot start {command[0]!r}: {e.strerror or e}"
    err.write(f"gpufleet-agent: {why}\n".encode())  # the user reads it with the logs
    return RunnerEvent("exited", key, code, why)


def _helped(cmd: AgentCommand) -> bool:
    """Whether taskstart runs in front of the command (a working directory or output files)."""
    return bool(cmd.workdir or cmd.output)


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
