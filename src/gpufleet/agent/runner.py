"""The task runner: each rank a subprocess in its own process group, logs to files, time limits
and kills by signal to the whole group.

Nothing here blocks on a task. ``poll(now)`` reaps what has exited and acts on deadlines
(warning signal → the job's signal; time limit → SIGTERM; grace over → SIGKILL), so a test
steps a ``ManualClock`` instead of sleeping through a grace period. Exits are reported as the
shell does: a task killed by a signal exits ``128 + signal``.

The warning signal is Slurm's ``--signal=[B:]SIG@T``: SIG goes out once per attempt, T seconds
before the time limit (at the first poll after the start when the limit is shorter than T), to
the task's whole process group; with ``B:`` only to its main process, the command the rank runs
(gpufleet runs the command once per rank and has no batch shell apart from it, so B: means that
rank's own process, not the children it started). The time limit's kill follows unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import psutil  # type: ignore[import-untyped]

from gpufleet.agent import sandbox, secrets
from gpufleet.agent.accounts import LaunchRefused, own_account, resolve
from gpufleet.agent.clock import MonotonicClock
from gpufleet.agent.taskenv import check_no_nul, task_env, with_step_commands
from gpufleet.api.schemas import AgentCommand, AgentEvent
from gpufleet.core.clock import Clock

log = logging.getLogger(__name__)

Key = tuple[str, int, int]  # (job, attempt, rank)
EXIT_REFUSED = 125  # the agent refused the launch or could not start it (as docker run does)
# the start of the why of a task its node stopped for its own sake (its lease expired): such
# an exit goes to the controller as cause "fenced", requeued rather than charged to the job
FENCED = "fenced:"
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # becomes a directory name


@dataclass(frozen=True, slots=True)
class RunnerEvent:
    kind: Literal["started", "exited"]
    key: Key
    exit_code: int = 0
    why: str = ""

    def wire(self) -> AgentEvent:
        job, attempt, rank = self.key
        return AgentEvent(
            kind=self.kind,
            job=job,
            attempt=attempt,
            rank=rank,
            exit_code=self.exit_code,
            why=self.why,
            cause="fenced" if self.why.startswith(FENCED) else "",
        )


@dataclass
class _Task:
    key: Key
    proc: subprocess.Popen[bytes]
    started_at: float
    time_limit_s: float | None
    grace_s: float
    gpus: tuple[int, ...]
    gpu_milli: int
    pidfile: Path
    tmp: Path  # its private temporary directory, removed when it is reaped
    stop_why: str | None = None  # set once we decided to stop it
    term_at: float | None = None  # when the SIGTERM went out
    kill_at: float | None = None  # when SIGKILL follows it
    killed_hard: bool = False
    warn_signal: int = 0  # the job's warning signal (0: none)
    warn_before_s: float = 0.0
    warn_batch_only: bool = False
    warned_at: float | None = None  # when it went out (once per attempt)


class LatestAttempts:
    """Job → the newest attempt seen, for the last ``limit`` jobs (the oldest are forgotten:
    their attempts were superseded long ago)."""

    def __init__(self, limit: int = 100_000) -> None:
        self._d: OrderedDict[str, int] = OrderedDict()
        self._limit = limit

    def get(self, job: str) -> int | None:
        return self._d.get(job)

    def put(self, job: str, attempt: int) -> None:
        self._d[job] = max(attempt, self._d.get(job, attempt))
        self._d.move_to_end(job)
        while len(self._d) > self._limit:
            self._d.popitem(last=False)


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class TaskRunner:
    def __init__(
        self,
        data_dir: Path,
        visible_devices: Callable[[Sequence[int]], str],
        clock: Clock | None = None,
        node_env: Mapping[str, str] | None = None,
        *,
        as_root: bool | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.visible_devices = visible_devices
        self.clock = clock or MonotonicClock()
        # what the node's admin gives every task (--task-env); never the agent's environment
        self.node_env = dict(node_env or {})
        self.as_root = os.geteuid() == 0 if as_root is None else as_root
        self.agent = own_account()
        if not self.as_root:
            log.warning(
                "the agent is not root: every task runs as its user %s (uid %d), whoever owns "
                "the job",
                self.agent.name,
                self.agent.uid,
            )
        self.step_bin = ""  # where srun/scontrol are (slurmbin.install); "" for none
        self._live: dict[Key, _Task] = {}
        self._latest = LatestAttempts()

    # ----- queries ------------------------------------------------------------------------

    def live(self) -> list[Key]:
        return sorted(self._live)

    def gpu_load(self) -> dict[int, float]:
        """GPU → share held by live tasks (1.0 a whole GPU), for the simulated backend."""
        load: dict[int, float] = {}
        for t in self._live.values():
            for g in t.gpus:
                load[g] = load.get(g, 0.0) + t.gpu_milli / 1000.0
        return load

    def log_paths(self, key: Key) -> tuple[Path, Path]:
        job, attempt, rank = key
        d = self.data_dir / job / str(attempt)
        return d / f"rank{rank}.out", d / f"rank{rank}.err"

    def tmp_path(self, key: Key) -> Path:
        job, attempt, rank = key
        return self.data_dir / job / str(attempt) / f"rank{rank}.tmpdir"

    # ----- launch -------------------------------------------------------------------------

    def launch(self, cmd: AgentCommand, now: float | None = None) -> list[RunnerEvent]:
        """Start one rank. Never raises: whatever stops a launch fails that task alone (exit
        125, the reason in its stderr log and its event) and the agent goes on."""
        now = self.clock.now() if now is None else now
        key: Key = (cmd.job, cmd.attempt, cmd.rank)
        if key in self._live:
            return []  # a redelivered launch
        if not _SAFE_ID.match(cmd.job):
            return [RunnerEvent("exited", key, EXIT_REFUSED, f"refused: bad job id {cmd.job!r}")]
        latest = self._latest.get(cmd.job)
        if latest is not None and cmd.attempt < latest:
            # a stale attempt never runs: the job has moved on to a newer one here
            why = f"refused: stale attempt {cmd.attempt} (this node ran attempt {latest})"
            return [RunnerEvent("exited", key, EXIT_REFUSED, why)]
        if not cmd.command:
            return [RunnerEvent("exited", key, EXIT_REFUSED, "refused: empty command")]
        self._latest.put(cmd.job, cmd.attempt)
        try:
            return [self._start(cmd, key, now)]
        except Exception as e:
            if isinstance(e, LaunchRefused):
                why = str(e)
                log.warning("%s/%d rank %d: %s", *key, why)
            else:
                why = f"the agent could not start the task: {type(e).__name__}: {e}"
                log.exception("%s/%d rank %d: could not start", *key)
            self._note(key, why)
            sandbox.remove_tree(self.tmp_path(key))
            return [RunnerEvent("exited", key, EXIT_REFUSED, why)]

    def _start(self, cmd: AgentCommand, key: Key, now: float) -> RunnerEvent:
        account = resolve(cmd.run_as, cmd.fallback_account, as_root=self.as_root, agent=self.agent)
        check_no_nul({}, cmd.command)
        out_path, err_path = self.log_paths(key)
        sandbox.private_dir(out_path.parent.parent)  # the agent's own: never the task's
        sandbox.private_dir(out_path.parent)
        tmp = self.tmp_path(key)
        sandbox.fresh_tmp(tmp, account)
        argv, tmpdir = sandbox.wrap(list(cmd.command), account, tmp)
        launch_env = {**cmd.env, **secrets.deliver(cmd.secrets, tmp, tmpdir, account)}
        env = task_env(account, tmpdir, self.node_env, launch_env, self.visible_devices(cmd.gpus))
        with_step_commands(env, self.step_bin)
        workdir = env.get("GPUFLEET_WORKDIR")
        if workdir and Path(workdir).is_dir():
            cwd = workdir
        elif sandbox.switches(account):  # as a login does; the agent's directory is not its
            cwd = account.home if Path(account.home).is_dir() else str(tmp)
        else:
            cwd = str(out_path.parent)
        out_fd = sandbox.open_log(out_path, account)
        try:
            err_fd = sandbox.open_log(err_path, account)
        except BaseException:
            os.close(out_fd)
            raise
        with open(out_fd, "ab") as out, open(err_fd, "ab") as err:
            missing = (
                _unrunnable(cmd.command[0], env.get("PATH"), cwd) if argv != cmd.command else None
            )
            if missing is not None:  # say so as Popen would, not as setpriv's exit 127
                sandbox.remove_tree(tmp)
                return self._spawn_failed(key, cmd, missing, err)
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,  # its own process group: a kill reaches its children
                    close_fds=True,
                )
            except OSError as e:
                sandbox.remove_tree(tmp)
                return self._spawn_failed(key, cmd, e, err)
        pidfile = out_path.with_name(f"rank{cmd.rank}.pid")
        try:
            _write_pidfile(pidfile, proc.pid)
        except BaseException:  # it must not run on unsupervised
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
            raise
        self._live[key] = _Task(
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
        )
        log.info("started %s/%d rank %d as %s: pid %d", *key, account.name, proc.pid)
        return RunnerEvent("started", key)

    def _note(self, key: Key, why: str) -> None:
        """The reason a task did not start, in its stderr log (best effort: the disk may be
        what failed)."""
        _, err_path = self.log_paths(key)
        try:
            sandbox.private_dir(err_path.parent.parent)
            sandbox.private_dir(err_path.parent)
            fd = sandbox.open_log(err_path, None)
            with open(fd, "ab") as err:
                err.write(f"gpufleet-agent: {why}\n".encode(errors="replace"))
        except Exception as e:
            log.warning("could not write the reason to %s: %s", err_path, e)

    @staticmethod
    def _spawn_failed(key: Key, cmd: AgentCommand, e: OSError, err: IO[bytes]) -> RunnerEvent:
        code = (
            EXIT_NOT_FOUND
            if isinstance(e, FileNotFoundError)
            else EXIT_NOT_EXECUTABLE
            if isinstance(e, PermissionError)
            else EXIT_REFUSED
        )
        why = f"cannot start {cmd.command[0]!r}: {e.strerror or e}"
        err.write(f"gpufleet-agent: {why}\n".encode())  # the user reads it with the logs
        return RunnerEvent("exited", key, code, why)

    # ----- stop ---------------------------------------------------------------------------

    def kill(self, key: Key, grace_s: float, why: str, now: float | None = None) -> bool:
        """SIGTERM to the task's group now, SIGKILL after ``grace_s``; False if not running."""
        t = self._live.get(key)
        if t is None:
            return False
        now = self.clock.now() if now is None else now
        if t.stop_why is None:
            t.stop_why = why
            t.term_at = now
            _signal_group(t.proc.pid, signal.SIGTERM)
            t.kill_at = now + max(0.0, grace_s)
        elif t.kill_at is not None and now + grace_s < t.kill_at:
            t.kill_at = now + max(0.0, grace_s)  # a second, more urgent kill shortens the grace
        if grace_s <= 0:
            self._kill_hard(t)
        return True

    def _kill_hard(self, t: _Task) -> None:
        if not t.killed_hard:
            t.killed_hard = True
            _signal_group(t.proc.pid, signal.SIGKILL)

    # ----- poll ---------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[RunnerEvent]:
        """Reap exited tasks and act on deadlines. Never blocks."""
        now = self.clock.now() if now is None else now
        out = []
        for key, t in list(self._live.items()):
            rc = _exit_status(t.proc)
            if rc is not None:
                del self._live[key]
                with contextlib.suppress(OSError):
                    t.pidfile.unlink()
                sandbox.remove_tree(t.tmp)
                out.append(RunnerEvent("exited", key, *self._describe(t, rc)))
                log.info("exited %s/%d rank %d: %s", *key, out[-1].why or "code 0")
                continue
            limit = t.time_limit_s
            warn = t.warn_signal and t.warned_at is None and t.stop_why is None
            if (
                warn
                and limit is not None
                and now >= t.started_at + max(0.0, limit - t.warn_before_s)
            ):
                self._warn(t, now)
            if t.stop_why is None and limit is not None and now >= t.started_at + limit:
                self.kill(key, t.grace_s, f"time limit ({limit:g} s) exceeded", now)
            if t.kill_at is not None and now >= t.kill_at:
                self._kill_hard(t)
        return out

    def _warn(self, t: _Task, now: float) -> None:
        t.warned_at = now
        sig = t.warn_signal
        if t.warn_batch_only:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(t.proc.pid, sig)  # the leader only; its pid is not reaped before poll
        else:
            _signal_group(t.proc.pid, sig)
        log.info(
            "%s/%d rank %d: %s to its %s, %g s before the time limit",
            *t.key,
            signal_name(sig),
            "main process" if t.warn_batch_only else "process group",
            t.warn_before_s,
        )

    def wait(self, timeout_s: float, step_s: float = 0.02) -> list[RunnerEvent]:
        """Poll until nothing is live or ``timeout_s`` of real time has passed."""
        end = time.monotonic() + timeout_s
        out = self.poll()
        while self._live and time.monotonic() < end:
            time.sleep(step_s)
            out += self.poll()
        return out

    @staticmethod
    def _describe(t: _Task, rc: int) -> tuple[int, str]:
        if rc < 0:
            code, how = 128 - rc, f"killed by {signal_name(-rc)}"
            if t.killed_hard and -rc == signal.SIGKILL and t.kill_at and t.term_at is not None:
                how += f" after {t.kill_at - t.term_at:g} s grace"
        else:
            code, how = rc, f"exited with code {rc}"
        if t.stop_why is not None:
            return code, f"{t.stop_why}; {how}"
        return code, "" if rc == 0 else how

    # ----- after an agent restart ---------------------------------------------------------

    def kill_orphans(self) -> list[Key]:
        """Kill the process groups a previous agent left running (their pid files remain):
        nobody supervises them, and the controller will run their jobs again elsewhere."""
        killed = []
        for pidfile in self.data_dir.glob("*/*/rank*.pid"):
            m = re.fullmatch(r"rank(\d+)\.pid", pidfile.name)
            if m is None or not pidfile.parent.name.isdigit():
                continue
            key: Key = (pidfile.parent.parent.name, int(pidfile.parent.name), int(m.group(1)))
            try:
                rec = json.loads(pidfile.read_text())
                pid, created = int(rec["pid"]), float(rec["create_time"])
            except (OSError, ValueError, KeyError, TypeError):
                pidfile.unlink(missing_ok=True)
                continue
            try:
                same = abs(psutil.Process(pid).create_time() - created) < 0.05
            except psutil.NoSuchProcess:
                same = True  # the leader is gone; its group may still hold children
            except psutil.Error:
                same = False
            if same and _signal_group(pid, signal.SIGKILL):
                killed.append(key)
                log.warning("killed orphaned task %s/%d rank %d (pid %d)", *key, pid)
            pidfile.unlink(missing_ok=True)
            sandbox.remove_tree(self.tmp_path(key))
        # secrets a previous agent delivered to tasks it no longer runs (a pid file lost, a
        # crash between the delivery and the start): no task of ours may still read them
        live = {self.tmp_path(k) for k in self._live}
        for d in secrets.leftovers(self.data_dir):
            if d.parent not in live:
                sandbox.remove_tree(d)
                log.warning("removed the secrets left in %s", d)
        return killed


def _unrunnable(program: str, path: str | None, cwd: str) -> OSError | None:
    """The error Popen would raise for ``program``, or None when it can be executed."""
    target = program if "/" not in program else str(Path(cwd, program))
    if shutil.which(target, path=path) is not None:
        return None
    if "/" in program and Path(target).exists():
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def _exit_status(proc: subprocess.Popen[bytes]) -> int | None:
    """The exit status, once the leader has exited; its group's stragglers die first.

    ``waitid(WNOWAIT)`` sees the exit without reaping, so the leader's pid — the group id —
    cannot be reused before the SIGKILL to the group lands.
    """
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        info = None
    except AttributeError:  # no waitid on this platform
        return proc.poll()
    if info is None:
        return proc.poll()
    _signal_group(proc.pid, signal.SIGKILL)  # children it left behind must not hold its GPUs
    return proc.wait(timeout=5)


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _write_pidfile(path: Path, pid: int) -> None:
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = 0.0
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": pid, "create_time": created}))
    tmp.replace(path)
