"""Start gpufleet's own processes by fork from one that has already imported them.

A test cluster's controller spends ~1 s of CPU importing its app (FastAPI routes, ~280 pydantic
models) and each agent ~0.3 s, before it does anything; the suite starts ~150 controllers and
~250 agents on 2 cores. A *zygote* (Android's word; gunicorn's ``--preload`` and CPython's
``forkserver`` do the same) imports them once, single-threaded, and forks one child per
request. The child is a real process that runs the module's ``__main__`` with its own argv,
environment, working directory, output file and session, exactly as ``python -m MODULE ARGV``
would, and ends as any interpreter does; only the import is shared.

The zygote is a child of the process that asked (a test worker), so only it can reap what it
forked: :class:`Forked` asks it for a child's exit status, and offers the part of
``subprocess.Popen`` that callers use (pid, returncode, poll, wait, send_signal, terminate,
kill). Anything that is not ``sys.executable -m`` one of the preloaded modules is started by
``subprocess.Popen`` as before.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any, Protocol

# what a test cluster runs: the controller (through the CLI) and the agent
DEFAULT_PRELOAD = ("gpufleet.cli.main", "gpufleet.server.app", "gpufleet.agent.main")
_MAX_MESSAGE = 1 << 20


class Proc(Protocol):
    """What LocalCluster and the tests use of a started process: Popen's surface."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class Forked:
    """A process the zygote forked: Popen's surface, its exit status asked of the zygote."""

    def __init__(self, zygote: Zygote, pid: int, args: Sequence[str]) -> None:
        self._zygote = zygote
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(pause)
            pause = min(0.05, pause * 2)  # quick for a child that is ending, cheap for a long wait
        return rc

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may have been reused
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The asking side: starts the zygote process and talks to it over a socket pair."""

    def __init__(self, preload: Sequence[str] = DEFAULT_PRELOAD) -> None:
        self.preload = tuple(preload)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "gpufleet.ops.prefork", str(theirs.fileno()), *self.preload],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()  # one request at a time: a test may start agents in threads
        ready = self._ask({"op": "ping"})
        if not ready.get("ok"):
            raise RuntimeError(f"the zygote could not preload {self.preload}: {ready.get('error')}")

    def serves(self, args: Sequence[str]) -> str | None:
        """The module that ``args`` runs, when the zygote can fork it (else None)."""
        if len(args) >= 3 and args[0] == sys.executable and args[1] == "-m":
            module = args[2]
            if module in self.preload or module == "gpufleet.agent":
                return module
        return None

    def spawn(
        self, module: str, argv: Sequence[str], env: dict[str, str], stdout: IO[bytes] | int
    ) -> Forked:
        fd = stdout if isinstance(stdout, int) else stdout.fileno()
        req = {"op": "spawn", "module": module, "argv": list(argv), "env": env, "cwd": os.getcwd()}
        reply = self._ask(req, fds=[fd])
        return Forked(self, int(reply["pid"]), [sys.executable, "-m", module, *argv])

    def status(self, pid: int) -> int | None:
        rc = self._ask({"op": "status", "pid": pid})["rc"]
        return None if rc is None else int(rc)

    def close(self) -> None:
        self._sock.close()  # the zygote sees the end of its socket and exits
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()

    def _ask(self, req: dict[str, Any], fds: Sequence[int] = ()) -> dict[str, Any]:
        data = json.dumps(req).encode()
        with self._lock:
            socket.send_fds(self._sock, [data], list(fds))
            reply = self._sock.recv(_MAX_MESSAGE)
        if not reply:
            raise RuntimeError("the zygote has exited")
        out: dict[str, Any] = json.loads(reply)
        return out


_shared: Zygote | None = None
_enabled = False
_shared_lock = threading.Lock()


def enable() -> None:
    """From now on, :func:`launch` forks what it can from one zygote of this process's own,
    started at its first use (the suite's workers call this: see tests/conftest.py)."""
    global _enabled
    _enabled = True


def shared() -> Zygote | None:
    """This process's zygote where :func:`enable` was called, else None."""
    global _shared
    with _shared_lock:
        if _enabled and _shared is None:
            _shared = Zygote()
            atexit.register(_shared.close)
        return _shared


def launch(args: Sequence[str], env: dict[str, str], stdout: IO[bytes], fork: bool = True) -> Proc:
    """``args`` started in a session of its own, writing to ``stdout``: forked by this process's
    zygote where there is one, it can, and ``fork``; else by Popen."""
    zygote = shared() if fork else None
    module = zygote.serves(args) if zygote is not None else None
    if zygote is not None and module is not None:
        return zygote.spawn(module, args[3:], env, stdout)
    return subprocess.Popen(
        list(args), stdout=stdout, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


# -- the zygote's side --------------------------------------------------------------------------


def _serve(sock: socket.socket) -> tuple[dict[str, Any], int] | None:
    """Answer requests until one is to be run by a forked child (returned in that child), or
    until the asking side has gone (None)."""
    ended: dict[int, int] = {}
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 1)
        except ConnectionResetError:
            return None
        if not data:
            return None
        req = json.loads(data)
        if req["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                sock.close()
                return req, fds[0]
            os.close(fds[0])
            ended.pop(pid, None)  # a pid reaped before is this new child's now
            reply: dict[str, Any] = {"pid": pid}
        elif req["op"] == "status":
            _reap(ended)
            reply = {"rc": ended.get(int(req["pid"]))}
        else:
            reply = {"ok": True}
        sock.send(json.dumps(reply).encode())


def _reap(ended: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ended[pid] = os.waitstatus_to_exitcode(status)


def _become(req: dict[str, Any], out_fd: int) -> None:
    """In the forked child: what Popen(start_new_session=True, stdout=out, stderr=STDOUT,
    env=env, cwd=cwd) and ``python -m MODULE ARGV`` would have set up."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.closerange(3, 1 << 16)  # as Popen's close_fds: nothing of the zygote's is inherited
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    import random

    random.seed()  # forked siblings would otherwise draw the same numbers
    sys.argv = ["-m", *req["argv"]]
    sys.path[0] = os.getcwd()  # as -m puts the working directory first
    # what re-executing "this same command" reads (a deposed controller does: cli/serve.py)
    sys.orig_argv = [sys.executable, "-m", req["module"], *req["argv"]]


def main(argv: Sequence[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    try:
        for module in argv[1:]:
            importlib.import_module(module)
        if threading.active_count() != 1:  # a fork would lose the other threads' locks
            raise RuntimeError(f"preloading started threads: {threading.enumerate()}")
    except Exception as e:  # said to the asking side, which raises it
        socket.recv_fds(sock, _MAX_MESSAGE, 1)
        sock.send(json.dumps({"ok": False, "error": repr(e)}).encode())
        return 1
    gc.collect()
    gc.freeze()  # the preloaded objects are never scanned again: a child copies fewer pages
    got = _serve(sock)
    if got is None:
        return 0
    req, out_fd = got
    _become(req, out_fd)
    import runpy
    import warnings

    # runpy's warning that the module was imported already: by the preload, on purpose (its
    # code runs again as __main__, a module of its own, as `python -m` runs it)
    warnings.filterwarnings("ignore", "'.*' found in sys.modules after import", RuntimeWarning)
    runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
