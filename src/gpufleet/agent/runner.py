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
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

import psutil  # type: ignore[import-untyped]

from gpufleet.agent import containers, sandbox, secrets, taskstart
from gpufleet.agent.accounts import Account, LaunchRefused, own_account, resolve
from gpufleet.agent.gpu import DeviceRef
from gpufleet.agent.probes import ProbeTarget
from gpufleet.agent.taskenv import (
    SECURE_PATH,
    check_no_nul,
    container_env,
    task_env,
    with_step_commands,
)
from gpufleet.api.schemas import AgentCommand, AgentEvent
from gpufleet.base.clock import Clock, MonotonicClock
from gpufleet.model.container import container_from_dict

log = logging.getLogger(__name__)

Key = tuple[str, int, int]  # (job, attempt, rank)
EXIT_REFUSED = 125  # the agent refused the launch or could not start it (as docker run does)
# the start of the why of a task its node stopped for its own sake (its lease expired): such
# an exit goes to the controller as cause "fenced", requeued rather than charged to the job
FENCED = "fenced:"
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
# what a batch job's other ranks run (see gpufleet.slurm.stepd), with the agent's interpreter
STEP_DAEMON = (sys.executable, "-I", "-m", "gpufleet.slurm.stepd")
TASKSTART = taskstart.__file__
IMAGE_ENV_TTL_S = 60.0  # how long an image's environment names are kept (see _image_env_names)
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
    # the command runs under taskstart's output copier (the group's leader), as its child
    behind_copier: bool = False
    container: str = ""  # its container's name, when it runs in one
    # how it was started, for its command probes (probes.ProbeTarget): its account, its
    # environment and its working directory as the runner gave them
    account: Account | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "/"


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
        container_runtime: containers.Runtime | None = None,
        device_refs: Callable[[Sequence[int]], Sequence[DeviceRef]] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.visible_devices = visible_devices
        # how a container runtime names the GPUs (MIG devices above all); None: by index
        self.device_refs = device_refs
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
        self.container_runtime = container_runtime
        # this agent's mark on its containers (OWNER_LABEL): the same after a restart
        self.container_owner = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[
            :16
        ]
        self._cleanups: list[subprocess.Popen[bytes]] = []  # `podman rm -f` still running
        self._image_envs: dict[str, tuple[frozenset[str], float]] = {}  # image → (names, when)

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

    def probe_target(self, key: Key, host: str) -> ProbeTarget | None:
        """What a probe of live task ``key`` runs against (``host``: where it listens, the
        agent's address); None when it is not live. A command probe runs as the task was
        started: its account, its environment, its private /tmp, its working directory. In a
        container that would take the runtime's exec, which is not done yet: refused."""
        t = self._live.get(key)
        if t is None:
            return None
        if t.container:
            return ProbeTarget(
                host=host,
                env=dict(t.env),
                refuse_commands="command probes do not run in containers yet",
            )
        return ProbeTarget(host=host, env=dict(t.env), account=t.account, tmp=t.tmp, cwd=t.cwd)

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
        if not cmd.command and cmd.role != "step":
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
        command = list(STEP_DAEMON) if cmd.role == "step" else list(cmd.command)
        check_no_nul({}, command)
        check_no_nul({}, [cmd.workdir, cmd.output, cmd.error, cmd.input])
        out_path, err_path = self.log_paths(key)
        sandbox.private_dir(out_path.parent.parent)  # the agent's own: never the task's
        sandbox.private_dir(out_path.parent)
        tmp = self.tmp_path(key)
        sandbox.fresh_tmp(tmp, account)
        helped = bool(cmd.workdir or cmd.output)
        env_fd: int | None = None  # a container's env file (see _in_container)
        env_on_stdin = True
        name = ""
        # a batch job's other ranks run gpufleet's step daemon, on the node as slurmstepd does:
        # never in the job's image, which has no gpufleet
        if cmd.container is not None and cmd.role != "step":
            # the task's /tmp is its directory in the container too: file secrets land there
            launch_env = {**cmd.env, **secrets.deliver(cmd.secrets, tmp, "/tmp", account)}
            ctr = self._in_container(cmd, key, account, tmp, launch_env)
            argv, env, env_fd, name, env_on_stdin = ctr
        else:
            wrapped = _started(cmd, command) if helped else command
            argv, tmpdir = sandbox.wrap(wrapped, account, tmp)
            launch_env = {**cmd.env, **secrets.deliver(cmd.secrets, tmp, tmpdir, account)}
            visible = self.visible_devices(cmd.gpus)
            env = task_env(account, tmpdir, self.node_env, launch_env, visible, cmd.user_env)
            with_step_commands(env, self.step_bin)
        if name:
            cwd = str(tmp)  # the runtime's; the task's is the container's workdir
        elif helped:  # taskstart enters the working directory as the task's user, not as root
            cwd = "/"
        elif sandbox.switches(account):  # as a login does; the agent's directory is not its
            cwd = account.home if Path(account.home).is_dir() else str(tmp)
        else:
            cwd = str(out_path.parent)
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
            missing = (
                _unrunnable(command[0], env.get("PATH"), where)
                if argv != command and not name
                else None
            )
            if missing is not None:  # say so as Popen would, not as setpriv's exit 127
                sandbox.remove_tree(tmp)
                return self._spawn_failed(key, command, missing, err)
            try:
                proc = subprocess.Popen(
                    argv,
                    # a container's environment: an unlinked file the runtime reads as its
                    # stdin (--env-file /dev/stdin) or, behind taskstart, as /dev/fd/N; never
                    # a value on a command line
                    stdin=env_fd if env_fd is not None and env_on_stdin else subprocess.DEVNULL,
                    pass_fds=(env_fd,) if env_fd is not None and not env_on_stdin else (),
                    stdout=out,
                    stderr=err,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,  # its own process group: a kill reaches its children
                    close_fds=True,
                )
            except OSError as e:
                sandbox.remove_tree(tmp)
                return self._spawn_failed(key, command, e, err)
            finally:
                _close(env_fd)
        pidfile = out_path.with_name(f"rank{cmd.rank}.pid")
        rt = self.container_runtime
        # what removes its container when a SIGKILL stops the runtime's client, for whoever
        # kills it (the watchdog, a restarted agent's kill_orphans)
        cleanup = rt.cleanup_argv(name) if name and rt is not None else None
        try:
            _write_pidfile(pidfile, proc.pid, cleanup)
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
            behind_copier=bool(cmd.output),
            container=name,
            account=account,
            # in a container, env is the runtime's own: its probes need only the port
            env=env if not name else {k: v for k, v in launch_env.items() if k == "PORT"},
            cwd=cwd,
        )
        log.info("started %s/%d rank %d as %s: pid %d", *key, account.name, proc.pid)
        return RunnerEvent("started", key)

    def _in_container(
        self, cmd: AgentCommand, key: Key, account: Account, tmp: Path, launch_env: dict[str, str]
    ) -> tuple[list[str], dict[str, str], int, str, bool]:
        """The runtime's command line, its process environment, the env file (a descriptor:
        an unlinked file), the container's name, and whether the env file is the runtime's
        stdin (else it is inherited as /dev/fd/N, stdin being the job's --input).

        A batch script's files (``--output``/``--error``/``--input``) are opened as the job's
        user by taskstart, which copies the output to them and to the agent's logs as for a
        bare job: a runtime that switches users itself (podman, docker) is started by a
        taskstart that opens them with the user's effective ids and runs it as root; one that
        runs as the job (apptainer, enroot) is started by the bare runner's taskstart."""
        rt = self.container_runtime
        if rt is None:
            raise LaunchRefused(
                "refused: the job runs in a container image but this node has no container "
                f"runtime ({', '.join(containers.ORDER)})"
            )
        try:
            spec = container_from_dict(cmd.container or {})
        except (KeyError, TypeError, ValueError) as e:
            raise LaunchRefused(f"refused: a bad container in the launch: {e}") from None
        gpus = tuple(cmd.gpus)
        refs = tuple(self.device_refs(gpus)) if self.device_refs is not None and gpus else ()
        mig = any(r.mig is not None for r in refs)
        cdi = containers.nvidia_cdi() if gpus else False
        parents = sorted({r.parent for r in refs}) if refs else list(gpus)
        nodes = [] if cdi else containers.nvidia_device_nodes(parents, mig=mig)
        # in the container the job's GPUs are its only ones, numbered from 0; without a device
        # (the simulated backend) they are what a bare task is told; a MIG device is known to
        # CUDA by its MIG-… UUID alone, in a container as outside
        isolated = rt.own_gpus_only and (
            cdi or any(n.rsplit("/", 1)[-1][6:].isdigit() for n in nodes)
        )
        visible = (
            ",".join(str(i) for i in range(len(gpus)))
            if isolated and not mig
            else self.visible_devices(cmd.gpus)
        )
        image_names = self._image_env_names(rt, spec.image)
        env = container_env(account, self.node_env, launch_env, visible, cmd.user_env, image_names)
        if rt.gpus_by_env:  # the runtime's hook mounts these (by UUID) and no others
            env["NVIDIA_VISIBLE_DEVICES"] = self.visible_devices(cmd.gpus) if gpus else "void"
        switch = getattr(rt, "switches_user", False)
        try:
            text = containers.env_file_text(env)
        except ValueError as e:
            raise LaunchRefused(f"refused: {e}") from None
        # the orphan sweep looks for containers only where this agent ever started one
        self._containers_used().touch(mode=0o600, exist_ok=True)
        fd = _unlinked_file(tmp.parent, text.encode())
        files = bool(cmd.output or cmd.input)  # behind taskstart, whose stdin is the job's
        if switch and sandbox.switches(account):  # the runtime, as the job, reopens the file
            try:
                os.fchown(fd, account.uid, account.gid)
            except BaseException:
                os.close(fd)
                raise
        name = containers.container_name(*key)
        task = containers.ContainerTask(
            name=name,
            image=spec.image,
            command=list(cmd.command),
            uid=account.uid,
            gid=account.gid,
            env_file=f"/dev/fd/{fd}" if files else "/dev/stdin",
            workdir=spec.workdir,
            mounts=spec.mounts,
            gpus=gpus,
            devices=refs,
            # a runtime started as the job sees the task's /tmp where the bare runner puts it
            # (the agent's directory above it is not the job's to enter)
            tmp="/tmp" if switch and sandbox.switches(account) else str(tmp),
            rootless=not self.as_root,
            ulimits=_ulimits(),
            cdi=cdi,
            device_nodes=nodes,
            owner=self.container_owner,
            env_names=tuple(env),
            stdin=bool(cmd.input),
        )
        try:
            argv = rt.argv(task)
            if files:
                who = None if switch or not sandbox.switches(account) else account
                argv = _started(cmd, argv, who, (fd,))
            if switch:  # an unprivileged runtime: started as the job's account
                argv, _ = sandbox.wrap(argv, account, tmp)
            else:  # it switches to the job's uid itself; dies with the agent all the same
                argv = [*sandbox.PDEATHSIG, *argv]
        except BaseException:
            os.close(fd)
            raise
        # the runtime's own process: only what it needs to find itself (the task's
        # environment is in the env file); a user-switching runtime gets the task's too
        proc_env = (
            dict(env)
            if switch
            else {"PATH": SECURE_PATH, "HOME": self.agent.home}
            | {k: v for k, v in os.environ.items() if k == "XDG_RUNTIME_DIR"}  # rootless podman
        )
        return argv, proc_env, fd, name, not files

    def _image_env_names(self, rt: containers.Runtime, image: str) -> frozenset[str] | None:
        """The names the image's own environment sets (``ENV``), which the login-like base and
        the submitter's environment do not override; None when the runtime cannot say (the
        image is not on the node yet, or a runtime without an inspect). Kept a minute: a
        service's replicas start from the same image."""
        now = self.clock.now()
        hit = self._image_envs.get(image)
        if hit is not None and now - hit[1] < IMAGE_ENV_TTL_S:
            return hit[0]
        argv = rt.image_env_argv(image)
        if argv is None:
            return None
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("could not inspect image %s: %s", image, e)
            return None
        if done.returncode != 0:
            log.info("image %s: no environment known (%s)", image, done.stderr.strip()[:200])
            return None
        names = frozenset(line.split("=", 1)[0] for line in done.stdout.splitlines() if "=" in line)
        self._image_envs[image] = (names, now)
        while len(self._image_envs) > 256:
            self._image_envs.pop(next(iter(self._image_envs)))
        return names

    def _containers_used(self) -> Path:
        return self.data_dir / "containers.used"

    def _remove_container(self, name: str) -> None:
        """``runtime rm -f`` in the background (reaped at a later poll): the container may
        outlive its client after a SIGKILL."""
        rt = self.container_runtime
        rm = rt.cleanup_argv(name) if rt is not None else None
        if rm is None:
            return
        try:
            self._cleanups.append(
                subprocess.Popen(
                    rm,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        except OSError as e:
            log.warning("could not remove container %s: %s", name, e)

    def sweep_containers(self, timeout_s: float = 60.0) -> list[str]:
        """Remove gpufleet's containers that no live task of this agent runs (left by an agent
        that died, or by a client killed before its container); blocking, at startup."""
        rt = self.container_runtime
        ls = rt.list_argv(self.container_owner) if rt is not None else None
        if rt is None or ls is None or not self._containers_used().exists():
            return []
        try:
            names = subprocess.run(
                ls, capture_output=True, text=True, timeout=timeout_s, check=True
            ).stdout.split()
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("could not list containers: %s", e)
            return []
        mine = {t.container for t in self._live.values()}
        removed = []
        for n in names:
            rm = rt.cleanup_argv(n)
            if n in mine or rm is None:
                continue
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(rm, capture_output=True, timeout=timeout_s, check=False)
                removed.append(n)
                log.warning("removed orphaned container %s", n)
        return removed

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
    def _spawn_failed(key: Key, command: list[str], e: OSError, err: IO[bytes]) -> RunnerEvent:
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
            if t.container:  # the runtime's client cannot pass a SIGKILL on
                self._remove_container(t.container)

    # ----- poll ---------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[RunnerEvent]:
        """Reap exited tasks and act on deadlines. Never blocks."""
        now = self.clock.now() if now is None else now
        out = []
        self._cleanups = [p for p in self._cleanups if p.poll() is None]
        for key, t in list(self._live.items()):
            rc = _exit_status(t.proc)
            if rc is not None:
                del self._live[key]
                with contextlib.suppress(OSError):
                    t.pidfile.unlink()
                if t.container and (t.stop_why is not None or rc < 0):
                    self._remove_container(t.container)  # its client was stopped: make sure
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
            for pid in _main_processes(t):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)  # its main process only (not reaped before poll)
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
            cleanup = rec.get("cleanup")
            if isinstance(cleanup, list) and all(isinstance(a, str) for a in cleanup):
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(cleanup, capture_output=True, timeout=60, check=False)
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


def _main_processes(t: _Task) -> list[int]:
    """The task's main process: the leader, or under the output copier its child (Slurm's
    B: signals the batch script, not what copies its output)."""
    if not t.behind_copier:
        return [t.proc.pid]
    try:
        return [c.pid for c in psutil.Process(t.proc.pid).children()]
    except psutil.Error:
        return []


def _started(
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


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _unlinked_file(directory: Path, data: bytes) -> int:
    """A descriptor of a file holding ``data`` that no name reaches (0600, the agent's)."""
    fd = os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _ulimits() -> list[tuple[str, int, int]]:
    """The agent's own open-file and process limits, for the container: runtimes default to
    limits above what the host allows (runc then fails to set them). Each is held to the
    kernel's own ceiling (fs.nr_open, kernel.pid_max), which some kernels enforce below the
    limit a process reports."""
    import resource

    out = []
    for name, which, ceiling in (
        ("nofile", resource.RLIMIT_NOFILE, "/proc/sys/fs/nr_open"),
        ("nproc", resource.RLIMIT_NPROC, "/proc/sys/kernel/pid_max"),
    ):
        soft, hard = resource.getrlimit(which)
        try:
            top = int(Path(ceiling).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            top = None
        if top is not None:
            hard = top if hard == resource.RLIM_INFINITY else min(hard, top)
            soft = hard if soft == resource.RLIM_INFINITY else min(soft, hard)
        out.append(
            (
                name,
                -1 if soft == resource.RLIM_INFINITY else soft,
                -1 if hard == resource.RLIM_INFINITY else hard,
            )
        )
    return out


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


def _write_pidfile(path: Path, pid: int, cleanup: list[str] | None = None) -> None:
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = 0.0
    tmp = path.with_suffix(".tmp")
    rec: dict[str, object] = {"pid": pid, "create_time": created}
    if cleanup:
        rec["cleanup"] = cleanup
    tmp.write_text(json.dumps(rec))
    tmp.replace(path)
