"""The first thing a task runs, as its own user: it enters the working directory and opens
the batch script's output files with the user's own rights, then runs the command.

The agent (root) never opens a path the user controls: the files of ``--output``/``--error``
are opened here, after the switch to the user's account, so a symlink there reaches only
what the user could write anyway. A directory the user cannot enter is Slurm's case too:
slurmstepd says ``couldn't chdir to …: going to /tmp instead`` on the job's stderr and runs
the script in /tmp; so does this.

With output files the command's stdout and stderr come through pipes and are copied both to
those files and to the agent's own logs (``gpufleet logs`` keeps working; the user's file is
the copy Slurm users look for). This process then stays, the leader of the task's process
group: a signal to the group reaches the command and is ignored here, and when the command
has exited the output still in the pipes is copied and this exits as the command did (by the
same signal, if one killed it). Without output files it becomes the command (exec).

A kill (a cancel's SIGTERM to the group) that comes before the command runs is never lost: noted
from this process's first instruction, held pending over the spawn and raised again in the
command's process before its exec, it ends the task before the command starts, as in the keeper
(before, one that came while the command was being spawned was swallowed here, and the command
ran on until the kill's SIGKILL).

A root container runtime (podman, docker) must itself be started as root, so it cannot run
under a taskstart that already switched to the job's user. Then the agent starts this as root
with ``as`` (the job's user, uid, gid) and it does what slurmstepd does: the working directory is
entered and the files opened with the user's effective ids and groups (seteuid), root's are
taken back, and the runtime, which switches to the user in the container itself, runs as root.
``pass_fds``: descriptors the command inherits (the runtime's env file, never on a command line).

``python -I .../gpufleet/agent/taskstart.py CONFIG -- COMMAND...`` (CONFIG: a JSON object
with ``workdir``, ``output``, ``error``, ``append``, ``input``, and optionally ``as`` and
``pass_fds``): run as a file, it imports only the standard library."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
EXIT_IO = 1  # Slurm fails the batch step when it cannot open its output
# the signals that reach the whole group (a kill, a warning): the command's, not this one's
_GROUP_SIGNALS = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
    signal.SIGUSR2, signal.SIGALRM,
)  # fmt: skip
_DRAIN_S = 0.2  # after the command exits: output its children still write is not waited for
# the group signals that stop a task (a cancel's, a fence's): one that comes before the command
# has started is noted, and the command then never starts (as in the keeper)
_KILLS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
_early: list[int] = []


def _noted(sig: int, frame: object) -> None:
    _early.append(sig)


def catch_early() -> None:
    """From our first instruction on, a kill to the group is noted, never lost: the command
    does not exist yet to receive it (before this, its default action ends this process, and
    the command never starts either)."""
    for sig in _GROUP_SIGNALS:
        signal.signal(sig, _noted)


def _hold_kills() -> int:
    """Block the kills; the first one noted so far (0: none). From here a kill stays pending
    until the command can receive it itself (``_to_command``), so none is lost in between."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _KILLS)
    killed = [s for s in _early if s in _KILLS]
    return killed[0] if killed else 0


def _die_before_start(sig: int) -> int:
    """Killed before the command started: it never does; this process ends by the signal."""
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _KILLS)
    os.kill(os.getpid(), sig)
    return 128 + sig


def _pending_in(pid: int) -> set[int]:
    """The kills pending for process ``pid`` (its /proc status; none when unreadable)."""
    mask = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"SigPnd:", b"ShdPnd:")):
                    mask |= int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return set()
    return {s for s in _KILLS if mask >> (s - 1) & 1}


def _to_command(parent: int) -> None:
    """In the command's process, before its exec, with the kills still blocked: the group's
    signals get their default actions back, and a kill that reached the group before this
    process existed (pending in ``parent``, not here: a fork does not inherit what is pending)
    is raised again here, so that any kill pending now ends it before the command runs. Read
    from the parent first, then here: a kill that came after the fork is pending in both, and
    is not raised twice."""
    before = _pending_in(parent) - signal.sigpending() if parent else set()
    for sig in before:
        os.kill(os.getpid(), sig)
    for sig in _GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _KILLS)


def enter(workdir: str) -> str:
    """chdir to ``workdir`` (none: the account's home), or to /tmp as slurmstepd does; what
    it says then (to the job's stderr), else ""."""
    if not workdir:  # none given (a job from the API): the account's home, as a login's
        try:
            os.chdir(os.environ.get("HOME") or "/tmp")
        except OSError:
            os.chdir("/tmp")
        return ""
    try:
        os.chdir(workdir)
    except OSError as e:
        os.chdir("/tmp")
        return (
            f"slurmstepd: error: couldn't chdir to `{workdir}': {e.strerror}: "
            "going to /tmp instead\n"
        )
    return ""


def open_output(path: str, append: bool) -> int:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | os.O_CLOEXEC
    return os.open(path, flags, 0o644)


def _die_with_parent(parent: int) -> None:
    # the command dies with this process, as this one dies with the agent (setpriv's
    # --pdeathsig): a task never runs on unsupervised
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    _own_pid()
    _to_command(parent)


def _own_pid() -> None:
    """A Slurm job's task (its batch script too) has its pid in SLURM_TASK_PID: set in the
    process that execs the command (putenv: the exec inherits it), which keeps its pid."""
    if "SLURM_JOB_ID" in os.environ:
        os.environ["SLURM_TASK_PID"] = str(os.getpid())


@contextlib.contextmanager
def as_user(who: dict[str, Any] | None) -> Iterator[None]:
    """The user's effective ids and groups inside, root's again after (slurmstepd's
    _drop_privileges/_reclaim_privileges); nothing when ``who`` is None or this is not root."""
    if not who or os.geteuid() != 0:
        yield
        return
    groups = os.getgroups()
    uid, gid = int(who["uid"]), int(who["gid"])
    try:
        extra = os.getgrouplist(str(who["name"]), gid)
    except (KeyError, OSError):
        extra = [gid]
    os.setgroups(extra)
    os.setegid(gid)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


def apply_umask() -> None:
    """The submitter's umask, which sbatch sent as SLURM_UMASK: the batch script runs with it,
    and the variable is consumed, as slurmstepd does (srun sets it again for its tasks)."""
    mask = os.environ.pop("SLURM_UMASK", "")
    if mask.isdigit() and len(mask) <= 4 and set(mask) <= set("01234567"):
        os.umask(int(mask, 8))


def run(config: dict[str, Any], command: list[str]) -> int:
    who = config.get("as")
    apply_umask()
    output, error = str(config.get("output") or ""), str(config.get("error") or "")
    stdin = subprocess.DEVNULL
    files: dict[str, int] = {}
    with as_user(who):
        said = enter(str(config.get("workdir") or ""))
        sys.stderr.write(said)  # gpufleet's log of the task's stderr
        sys.stderr.flush()
        if config.get("input"):  # sbatch's --input: opened as the user too
            try:
                stdin = os.open(str(config["input"]), os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                sys.stderr.write(
                    f"slurmstepd: error: Could not open stdin file {e.filename}: {e.strerror}\n"
                )
                return EXIT_IO
            if not output:
                os.dup2(stdin, 0)
        if output:
            append = bool(config.get("append"))
            try:
                files["out"] = open_output(output, append)
                same = not error or error == output
                files["err"] = files["out"] if same else open_output(error, append)
            except OSError as e:
                which = "stdout" if "out" not in files else "stderr"
                sys.stderr.write(
                    f"slurmstepd: error: Could not open {which} file {e.filename}: {e.strerror}\n"
                )
                return EXIT_IO
    if who:  # the command is a root runtime: a directory of the user's is not its to hold
        os.chdir("/")
    pass_fds = tuple(int(fd) for fd in config.get("pass_fds") or ())
    for fd in pass_fds:
        os.set_inheritable(fd, True)
    if killed := _hold_kills():
        return _die_before_start(killed)
    if not output:  # this process becomes the command: no fork, nothing pending elsewhere
        _own_pid()
        _to_command(0)
        try:
            os.execvp(command[0], command)
        except OSError as e:
            sys.stderr.write(f"gpufleet-agent: cannot start {command[0]!r}: {e.strerror}\n")
            return EXIT_NOT_FOUND if isinstance(e, FileNotFoundError) else EXIT_NOT_EXECUTABLE
    _write_all(files["err"], said.encode())  # and the job's own stderr file, as Slurm's
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    proc = _spawn(command, stdin, (out_w, err_w), pass_fds, files["err"])
    if isinstance(proc, int):
        return proc
    os.close(out_w)
    os.close(err_w)
    copies = {
        out_r: (sys.stdout.fileno(), files["out"]),
        err_r: (sys.stderr.fileno(), files["err"]),
    }
    rc = _copy(proc, copies)
    if rc < 0:
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        return 128 - rc
    return rc


def _spawn(
    command: list[str], stdin: int, outputs: tuple[int, int], pass_fds: tuple[int, ...], err: int
) -> subprocess.Popen[bytes] | int:
    """The command, as this process's child (the kills held until it runs: ``_to_command``);
    the exit status when it cannot be started."""
    parent = os.getpid()
    try:
        proc = subprocess.Popen(
            command,
            stdin=stdin,
            stdout=outputs[0],
            stderr=outputs[1],
            preexec_fn=lambda: _die_with_parent(parent),
            restore_signals=True,
            pass_fds=pass_fds,
        )
    except OSError as e:
        _ignore_group_signals()
        os.write(err, f"cannot start {command[0]!r}: {e.strerror}\n".encode())
        sys.stderr.write(f"gpufleet-agent: cannot start {command[0]!r}: {e.strerror}\n")
        return EXIT_NOT_FOUND if isinstance(e, FileNotFoundError) else EXIT_NOT_EXECUTABLE
    _ignore_group_signals()
    return proc


def _ignore_group_signals() -> None:
    """The group's signals are the command's from now on (it exists, or never will): ignored
    here, what was pending included (the command had it already, or ``_to_command`` raised it
    there), so that this process stays to copy the command's last output and its status."""
    for sig in _GROUP_SIGNALS:
        signal.signal(sig, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _KILLS)


def _copy(proc: subprocess.Popen[bytes], copies: dict[int, tuple[int, int]]) -> int:
    """Copy each pipe to both its targets until the command has exited and its pipes are
    quiet; the command's exit status."""
    open_fds = set(copies)
    while open_fds:
        done = proc.poll() is not None
        ready, _, _ = select.select(list(open_fds), [], [], _DRAIN_S if done else 0.5)
        if not ready and done:
            break
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                open_fds.discard(fd)
                continue
            for target in copies[fd]:
                _write_all(target, data)
    return proc.wait()


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # a full disk loses the copy, not the job


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python taskstart.py CONFIG -- COMMAND...\n")
        return 2
    catch_early()
    return run(json.loads(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
