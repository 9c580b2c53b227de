"""A task's keeper: the leader of its process group, which outlives the agent (ADR 0031).

The agent starts every rank as ``python -I -S keeper.py EXIT_FILE PID_FILE AGENT_PID --
COMMAND...`` in a session of its own. The keeper starts the command once the agent has written
the pid file (until then it dies with the agent: a task that nobody can find never runs), as its
child, and waits for it; it ignores the signals that reach the whole group (a kill's SIGTERM, a
warning signal: they are the command's), and when the command has exited it writes its status
to ``EXIT_FILE`` (Popen's convention: ``-N`` for a signal), then exits as the command did (by
the same signal, if one killed it).

Why it exists: the command must not be the agent's child. A child's exit status can be read
only by its parent, and the agent may die (SIGKILL, OOM) or be restarted (an upgrade) while
its tasks run: they then belong to the node's watchdog, which fences them only at the outage
tolerance's end, and the next agent adopts them (their pid files) and learns how each ended
from this file. The command dies with its keeper (PR_SET_PDEATHSIG), never with the agent: a
keeper SIGKILLed (the watchdog's fence, the agent's kill after the grace) takes it along.

Nothing runs unsupervised forever: every ``SUPERVISION_S`` the keeper checks that someone
supervises its task: the agent that started it (its parent), or the agent or the watchdog that
the node's lease file names (``lease.json`` in the data directory: a dead agent's watchdog,
which fences at the lease's end, or the next agent, which adopted the task). When none is alive
(an agent without a watchdog killed, or the agent and its watchdog both), it marks the task
fenced (``rank*.fenced``, as the watchdog does), starts the removal of its container, and
SIGKILLs its process group, itself included.

Run as a file, standard library only, without ``site`` (-S): it starts in a few milliseconds.
"""

from __future__ import annotations

# the C module: ``signal`` imports enum, functools and collections, ~10 ms before every task
import _signal as signal  # type: ignore[import-not-found]
import os
import sys
import time

# os, _signal, sys and time only (no subprocess, ctypes, contextlib): each import costs
# milliseconds before the task starts, on every launch
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
EXIT_NO_START = 125  # the agent never recorded the task (as the agent's refusals)
SUPERVISION_S = 1.0  # how often it checks that an agent or a watchdog is alive
UNSUPERVISED = "fenced: neither its agent nor the node's watchdog was alive (its keeper killed it)"
# the signals that reach the whole group (a kill, a warning): the command's, not this one's
_GROUP_SIGNALS = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
    signal.SIGUSR2, signal.SIGALRM, signal.SIGPIPE,
)  # fmt: skip


# the group signals that stop a task (a cancel's or a fence's): before the command runs, noted
_KILLS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
_early: list[int] = []


def _noted(sig: int, frame: object) -> None:
    _early.append(sig)


def _killed() -> list[int]:
    return [s for s in _early if s in _KILLS]


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


def _to_command(keeper: int) -> None:
    """In the forked child, the kills still blocked: a kill that reached the group before the
    fork is pending in the keeper alone (a fork does not inherit what is pending): it is raised
    again here, then the group's signals get their defaults and the kills are let in, so that a
    kill pending now ends this process before the command runs. The keeper's pending kills are
    read first, then ours: one that came after the fork is pending in both and is not raised
    twice (taskstart does the same over its own spawn)."""
    for sig in _pending_in(keeper) - signal.sigpending():
        os.kill(os.getpid(), sig)
    for sig in _GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _KILLS)


def _die_before_start(exit_file: str, sig: int) -> int:
    """Killed before the command started: it never does; the status says the signal."""
    write_status(exit_file, -sig)
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _KILLS)
    os.kill(os.getpid(), sig)
    return 128 + sig


def write_status(path: str, rc: int) -> None:
    """Atomically: a reader never sees half a number."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, str(rc).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_status(path: str) -> int | None:
    """What a keeper wrote (None: nothing, or not a number)."""
    try:
        with open(path, "rb") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def await_pidfile(pidfile: str, agent: int, timeout_s: float = 60.0) -> bool:
    """Until the agent has written our pid file, nothing could find this task should the agent
    die (no watchdog, no next agent): so nothing starts until then, and if the agent dies first
    (we are someone else's child now) nothing ever does. It is written right after the spawn:
    usually there before this process has started Python."""
    end = time.monotonic() + timeout_s
    while not os.path.exists(pidfile):
        if os.getppid() != agent or time.monotonic() >= end:
            return False
        time.sleep(0.002)
    return os.getppid() == agent


def _exec(command: list[str], keeper: int) -> None:
    """In the forked child: die with the keeper (PR_SET_PDEATHSIG; setpriv in front of the
    command does it already, as the agent starts every task), then become the command."""
    try:
        if not any(a.startswith("--pdeathsig") for a in command[:3]):
            import ctypes  # only here: ~10 ms

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
            if os.getppid() != keeper:
                os._exit(EXIT_NO_START)
        os.execvp(command[0], command)
    except OSError as e:
        os.write(2, f"gpufleet-agent: cannot start {command[0]!r}: {e.strerror}\n".encode())
        os._exit(EXIT_NOT_FOUND if isinstance(e, FileNotFoundError) else EXIT_NOT_EXECUTABLE)
    finally:
        os._exit(EXIT_NOT_EXECUTABLE)


def _fork(command: list[str]) -> int:
    """The command's process; returns once it has run ``_to_command`` (at its exec, or its
    death before it): until then what is pending here must stay so, for it to read."""
    keeper = os.getpid()
    ran, running = os.pipe()  # not inherited by the exec: closed by it
    child = os.fork()
    if child == 0:
        os.close(ran)
        _to_command(keeper)
        _exec(command, keeper)
    os.close(running)
    while os.read(ran, 1):  # interrupted by a group signal: retried (PEP 475)
        pass
    os.close(ran)
    return child


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return False
    return state not in ([b"Z"], [b"X"], [])


def supervisors(pidfile: str) -> list[int]:
    """The agent and the watchdog that the node's lease file names (the data directory's,
    three levels above ``DATA/JOB/ATTEMPT/rankN.pid``); none when it cannot be read."""
    import json  # only here, once the task runs: ~5 ms

    lease = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(pidfile))), "lease.json")
    try:
        with open(lease, "rb") as f:
            rec = json.loads(f.read())
        return [int(rec.get(k) or 0) for k in ("pid", "watchdog")]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def supervised(pidfile: str, agent: int) -> bool:
    if os.getppid() == agent:  # ours is alive (an orphan's parent is init or a subreaper)
        return True
    return any(p > 0 and p != os.getpid() and alive(p) for p in supervisors(pidfile))


def fence(pidfile: str) -> None:
    """Nobody supervises the task: mark it fenced, remove its container, kill the group."""
    base = pidfile[: -len(".pid")] if pidfile.endswith(".pid") else pidfile
    try:
        with open(f"{base}.fenced", "w") as f:
            f.write(UNSUPERVISED)
        import json

        with open(pidfile, "rb") as f:
            cleanup = json.loads(f.read()).get("cleanup")
    except (OSError, ValueError, AttributeError):
        cleanup = None
    removal = isinstance(cleanup, list) and cleanup and all(isinstance(a, str) for a in cleanup)
    if removal and os.fork() == 0:  # `podman rm -f`: the container outlives its client's SIGKILL
        try:
            os.setsid()  # out of the group about to be killed
            os.execvp(cleanup[0], cleanup)
        finally:
            os._exit(EXIT_NOT_FOUND)
    os.killpg(os.getpid(), signal.SIGKILL)


def check(pidfile: str, agent: int) -> None:
    if not supervised(pidfile, agent):
        fence(pidfile)


def run(exit_file: str, command: list[str], pidfile: str = "", agent: int = 0) -> int:
    for sig in _GROUP_SIGNALS:  # a handler is reset by exec: the command gets the defaults
        signal.signal(sig, _noted)
    if pidfile and not await_pidfile(pidfile, agent):
        return EXIT_NO_START
    # a kill that came before the command existed is not lost: blocked from here, it is either
    # seen now (the command never starts) or raised again in the child (``_to_command``), which
    # it then ends before the command runs; never sent twice
    signal.pthread_sigmask(signal.SIG_BLOCK, _KILLS)
    if _killed():
        return _die_before_start(exit_file, _killed()[0])
    child = _fork(command)
    for sig in _GROUP_SIGNALS:  # the group's signals reach the command itself
        signal.signal(sig, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _KILLS)  # the child has what was pending
    if pidfile:  # checked between the waits (PEP 475: the wait goes on after the handler)
        signal.signal(signal.SIGALRM, lambda *_: check(pidfile, agent))
        signal.setitimer(signal.ITIMER_REAL, SUPERVISION_S, SUPERVISION_S)
    _, status = os.waitpid(child, 0)  # interrupted by a group signal: retried (PEP 475)
    signal.setitimer(signal.ITIMER_REAL, 0.0)
    rc = os.waitstatus_to_exitcode(status)  # -N for a signal, as Popen's
    try:
        write_status(exit_file, rc)
    except OSError as e:  # a full disk: the agent, if alive, reads the status as our exit
        sys.stderr.write(f"gpufleet-agent: cannot record the exit status: {e.strerror}\n")
    if rc < 0:
        if -rc not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught anyway
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        return 128 - rc
    return rc


def main(argv: list[str]) -> int:
    if len(argv) >= 5 and argv[3] == "--":  # EXIT_FILE PID_FILE AGENT_PID -- COMMAND...
        return run(argv[0], argv[4:], argv[1], int(argv[2]))
    if len(argv) >= 3 and argv[1] == "--":
        return run(argv[0], argv[2:])
    sys.stderr.write("usage: keeper.py EXIT_FILE [PID_FILE AGENT_PID] -- COMMAND...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
