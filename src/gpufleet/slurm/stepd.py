"""The step daemon: on every node of a batch job but the first, it holds the node and runs the
tasks ``srun`` asks for there (Slurm's slurmstepd, as far as a job needs it).

``python -m gpufleet.slurm.stepd``, configured from its environment: ``GPUFLEET_STEP_HOSTS``
(its own entry is ``GPUFLEET_STEP_SLOT``'s, else ``RANK``'s), ``GPUFLEET_STEP_KEY``. It already
runs as the job's user with the job's environment; tasks run so too, with the environment srun
sends. An srun that goes away (killed, its connection lost) takes its tasks with it (SIGKILL);
SIGTERM ends every task (SIGTERM, SIGKILL after ``KILL_WAIT_S``) and exits 0."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpufleet.slurm import wire
from gpufleet.slurm.tasks import TaskSet

log = logging.getLogger("gpufleet.stepd")
KILL_WAIT_S = 5.0  # SIGTERM to SIGKILL when srun asks a step to stop (Slurm's KillWait)
MAX_TASKS = 4096
MAX_CONNECTIONS = 64
# what a node's own environment says of itself, given to its tasks over srun's
NODE_KEYS = (
    "SLURMD_NODENAME",
    "TMPDIR",
    "SLURM_CPUS_ON_NODE",
    "SLURM_MEM_PER_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "GPUFLEET_STEP_SLOT",
)


def node_info(env: Mapping[str, str], slot: int) -> dict[str, Any]:
    """What srun needs to know of a node to build its tasks' environments."""
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    return {
        "slot": slot,
        "name": env.get("SLURMD_NODENAME") or socket.gethostname(),
        "gpus": [g for g in visible.split(",") if g],
        "job_gpus": [g for g in env.get("SLURM_JOB_GPUS", "").split(",") if g],
        "env": {k: env[k] for k in NODE_KEYS if k in env},
    }


def own_slot(env: Mapping[str, str]) -> int:
    for var in ("GPUFLEET_STEP_SLOT", "RANK"):
        v = env.get(var, "")
        if v.isdigit():
            return int(v)
    return 0


def _strings(v: Any, what: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) and "\0" not in x for x in v):
        raise wire.WireError(f"{what}: want a list of strings without NUL")
    return v


def _env(v: Any) -> dict[str, str]:
    ok = isinstance(v, dict) and all(
        isinstance(k, str)
        and k
        and "=" not in k
        and "\0" not in k
        and isinstance(x, str)
        and "\0" not in x
        for k, x in v.items()
    )
    if not ok:
        raise wire.WireError("env: want an object of strings (names without '=' or NUL)")
    return v  # type: ignore[no-any-return]


def _launch(
    msg: dict[str, Any],
) -> tuple[list[str], str, list[tuple[int, dict[str, str]]], bool]:
    if msg.get("t") != "launch":
        raise wire.WireError(f"expected a launch, got {msg.get('t')!r}")
    argv = _strings(msg.get("argv"), "argv")
    cwd = msg.get("cwd")
    tasks = msg.get("tasks")
    if not argv or not isinstance(cwd, str) or not isinstance(tasks, list):
        raise wire.WireError("a launch needs argv, cwd and tasks")
    if not 0 < len(tasks) <= MAX_TASKS:
        raise wire.WireError(f"a launch holds 1 to {MAX_TASKS} tasks")
    common = _env(msg.get("env", {}))  # the step's environment, once; each task's over it
    out = []
    for t in tasks:
        if not isinstance(t, dict) or not isinstance(t.get("procid"), int):
            raise wire.WireError("each task needs a procid and an env")
        out.append((t["procid"], {**common, **_env(t.get("env"))}))
    return argv, cwd, out, msg.get("unbuffered") is True


class StepDaemon:
    def __init__(self, key: bytes, slot: int, env: Mapping[str, str]) -> None:
        self.key = key
        self.slot = slot
        self.info = node_info(env, slot)
        self.steps: set[TaskSet] = set()
        self.lock = threading.Lock()
        self.conns = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.stopping = threading.Event()

    def serve(self, listener: socket.socket) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                if self.stopping.is_set():
                    return
                continue
            if not self.conns.acquire(blocking=False):
                conn.close()  # a flood of connections: refuse, keep serving the others
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(wire.AUTH_TIMEOUT_S)
                wire.serve_auth(conn, self.key)
                wire.send(conn, {"t": "node", **self.info})
                argv, cwd, tasks, unbuffered = _launch(wire.recv(conn))
                conn.settimeout(None)
                self._run(conn, argv, cwd, tasks, unbuffered)
        except (OSError, wire.WireError) as e:
            log.info("connection closed: %s", e)
        finally:
            self.conns.release()

    def _run(
        self,
        conn: socket.socket,
        argv: list[str],
        cwd: str,
        tasks: list[tuple[int, dict[str, str]]],
        unbuffered: bool,
    ) -> None:
        send_lock = threading.Lock()
        gone = threading.Event()

        def emit(msg: dict[str, Any]) -> None:
            if gone.is_set():
                return
            try:
                with send_lock:
                    wire.send(conn, msg)
            except (OSError, wire.WireError):
                gone.set()

        ts = TaskSet(emit, unbuffered=unbuffered)
        with self.lock:
            if self.stopping.is_set():
                return
            self.steps.add(ts)
        try:
            where = cwd if Path(cwd).is_dir() else _fallback_dir(cwd, tasks, emit)
            for procid, env in tasks:
                try:
                    ts.start(procid, argv, env, where)
                except OSError as e:
                    emit({"t": "out", "task": procid, "fd": 2, "data": f"stepd: {e}\n"})
                    emit({"t": "exit", "task": procid, "status": 127})
            threading.Thread(target=self._listen, args=(conn, ts, gone), daemon=True).start()
            while not ts.wait(0.5):
                if gone.is_set():  # srun went away: its tasks go too
                    ts.signal(signal.SIGKILL)
                    ts.wait(KILL_WAIT_S)
                    return
            emit({"t": "done"})
        finally:
            with self.lock:
                self.steps.discard(ts)

    def _listen(self, conn: socket.socket, ts: TaskSet, gone: threading.Event) -> None:
        """srun's requests while the step runs; its connection closing ends the step."""
        try:
            while True:
                msg = wire.recv(conn)
                sig = msg.get("sig")
                if msg.get("t") == "signal" and isinstance(sig, int) and 0 < sig < 65:
                    if sig == signal.SIGTERM:
                        threading.Thread(
                            target=ts.terminate, args=(KILL_WAIT_S,), daemon=True
                        ).start()
                    else:
                        ts.signal(sig)
        except (OSError, wire.WireError):
            gone.set()

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            steps = list(self.steps)
        # SIGTERM first (a job cancelled or out of time may checkpoint), SIGKILL after the wait
        for ts in steps:
            ts.signal(signal.SIGTERM)
        deadline = time.monotonic() + KILL_WAIT_S
        for ts in steps:
            ts.wait(max(0.0, deadline - time.monotonic()))
        for ts in steps:
            ts.signal(signal.SIGKILL)
            ts.wait(KILL_WAIT_S)


def _fallback_dir(cwd: str, tasks: list[tuple[int, dict[str, str]]], emit: Any) -> str:
    # as slurmstepd: a working directory missing on this node is said, and /tmp used instead
    where = tasks[0][1].get("TMPDIR") or "/tmp"
    for procid, _ in tasks:
        why = f"stepd: error: couldn't chdir to `{cwd}': no such directory: going to {where}\n"
        emit({"t": "out", "task": procid, "fd": 2, "data": why})
    return where


def listen(addr: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((addr, port))
    except OSError as e:
        # the registered address may be one this host does not hold (NAT): every interface
        if e.errno != 99:  # EADDRNOTAVAIL
            s.close()
            raise
        s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    s.listen(64)
    return s


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="stepd: %(message)s")
    try:
        key = wire.step_key()
        hosts = wire.parse_hosts(os.environ.get("GPUFLEET_STEP_HOSTS", ""))
    except wire.WireError as e:
        print(f"stepd: error: {e}", file=sys.stderr)
        return 1
    slot = own_slot(os.environ)
    if slot >= len(hosts):
        print(f"stepd: error: slot {slot} has no entry in GPUFLEET_STEP_HOSTS", file=sys.stderr)
        return 1
    addr, port = hosts[slot]
    try:
        listener = listen(addr, port)
    except OSError as e:
        print(f"stepd: error: cannot listen on {addr}:{port}: {e.strerror or e}", file=sys.stderr)
        return 1
    daemon = StepDaemon(key, slot, os.environ)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=daemon.serve, args=(listener,), daemon=True).start()
    print(f"stepd: serving {addr}:{port} (slot {slot})", file=sys.stderr, flush=True)
    while not stop.wait(1.0):
        pass
    daemon.stop()
    with contextlib.suppress(OSError):
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
