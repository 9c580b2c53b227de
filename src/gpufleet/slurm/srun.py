"""``srun`` inside a gpufleet batch job: one job step across the job's allocation.

Tasks on srun's own node (the batch script's, slot 0) are started here; the others by each
node's step daemon (``stepd``), reached through ``GPUFLEET_STEP_HOSTS`` with the job's
``GPUFLEET_STEP_KEY``. Output comes back line by line (``-l``: prefixed with the task id), and
srun exits as Slurm's does: the highest task exit code, or 128+signal for a task a signal
ended, with an ``srun: error: NODE: task N: ...`` line for each that failed."""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from gpufleet.model import fname
from gpufleet.slurm import wire
from gpufleet.slurm.layout import base_env, capacities, plan, task_envs
from gpufleet.slurm.srun_opts import Options, SrunError, parse
from gpufleet.slurm.stepd import KILL_WAIT_S, node_info, own_slot
from gpufleet.slurm.tasks import TaskSet, encode

OUTSIDE = (
    "srun: error: gpufleet's srun runs inside a batch job; submit with gpufleet submit / "
    "sbatch (no SLURM_JOB_ID or GPUFLEET_STEP_HOSTS here)"
)
CONNECT_TIMEOUT_S = 10.0
# a batch script may run srun before the other nodes' step daemons listen (every rank starts
# at once): a refused connection is tried again until this long after srun started
DAEMON_WAIT_S = float(os.environ.get("GPUFLEET_STEP_WAIT_S", "60"))
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2)  # fmt: skip
USAGE = "Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]"


def err(msg: str) -> None:
    sys.stderr.write(f"srun: {msg}\n")
    sys.stderr.flush()


def next_step_id(env: Mapping[str, str]) -> int:
    """0, 1, … per srun in the job: a counter file in the job's temporary directory, locked
    so that steps started at once get distinct ids."""
    path = Path(env.get("TMPDIR") or "/tmp") / f".gpufleet-steps-{env.get('SLURM_JOB_ID', '')}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.read(fd, 32).decode(errors="replace").strip()
        n = int(text) if text.isdigit() else 0
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, f"{n + 1}\n".encode())
        return n
    finally:
        os.close(fd)


def split_common(
    tasks: Sequence[tuple[int, dict[str, str]]],
) -> tuple[dict[str, str], list[tuple[int, dict[str, str]]]]:
    """What every task's environment shares (sent once), and each task's own values."""
    first = tasks[0][1]
    common = {k: v for k, v in first.items() if all(e.get(k) == v for _, e in tasks[1:])}
    return common, [(p, {k: v for k, v in e.items() if common.get(k) != v}) for p, e in tasks]


def labelled(data: bytes, task: int, width: int) -> bytes:
    """As srun's -l: every line prefixed with the task id, zero-padded to the width of the
    highest; a piece that does not end its line is ended (a label always starts a line)."""
    prefix = f"{task:0{width}d}: ".encode()
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return b"".join(prefix + line + b"\n" for line in lines)


def ranges(ids: Sequence[int]) -> str:
    out: list[str] = []
    ids = sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def describe(status: int) -> str:
    if status < 0:
        return signal.strsignal(-status) or f"Signal {-status}"
    return f"Exited with exit code {status}"


def umask() -> str:
    mask = os.umask(0o022)
    os.umask(mask)
    return f"{mask:04o}"


def exit_code(status: int) -> int:
    return 128 + -status if status < 0 else status


def _dial(addr: str, port: int, deadline: float) -> socket.socket:
    while True:
        try:
            return socket.create_connection((addr, port), timeout=CONNECT_TIMEOUT_S)
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)  # not listening yet: its rank is still starting


class Remote:
    """One step daemon's connection: authenticated, its node's facts, then the step's
    events into srun's queue."""

    def __init__(self, slot: int, addr: str, port: int) -> None:
        self.slot, self.addr, self.port = slot, addr, port
        self.sock: socket.socket | None = None
        self.info: dict[str, Any] = {}
        self.error = ""
        self.lock = threading.Lock()

    def connect(self, key: bytes) -> None:
        try:
            sock = _dial(self.addr, self.port, time.monotonic() + DAEMON_WAIT_S)
            self.sock = sock
            wire.client_auth(sock, key)
            info = wire.recv(sock)
            if info.get("t") != "node" or not isinstance(info.get("name"), str):
                raise wire.WireError("expected the node's facts")
            self.info = info
        except ConnectionRefusedError:
            self.error = (
                f"no step daemon listens there after {DAEMON_WAIT_S:g} s (its rank ended, or "
                "the job is not a batch job, whose other ranks serve srun)"
            )
            self.close()
        except (OSError, wire.WireError) as e:
            self.error = str(e) or type(e).__name__
            self.close()

    def send(self, msg: dict[str, Any]) -> bool:
        try:
            with self.lock:
                if self.sock is None:
                    return False
                wire.send(self.sock, msg)
            return True
        except (OSError, wire.WireError):
            return False

    def pump(self, q: queue.Queue[dict[str, Any]]) -> None:
        assert self.sock is not None
        why = ""
        try:
            self.sock.settimeout(None)
            while True:
                msg = wire.recv(self.sock)
                if msg.get("t") == "done":
                    return
                if msg.get("t") in ("out", "exit") and isinstance(msg.get("task"), int):
                    q.put(msg)
        except (OSError, wire.WireError) as e:
            why = str(e) or type(e).__name__
        finally:
            q.put({"t": "lost", "slot": self.slot, "why": why})

    def close(self) -> None:
        with self.lock:
            if self.sock is not None:
                with contextlib.suppress(OSError):
                    self.sock.close()
                self.sock = None


class Step:
    def __init__(self, o: Options, env: Mapping[str, str]) -> None:
        self.o = o
        self.env = env
        self.q: queue.Queue[dict[str, Any]] = queue.Queue()
        self.local = TaskSet(self.q.put, unbuffered=o.unbuffered)
        self.remotes: dict[int, Remote] = {}
        self.node_of: dict[int, str] = {}  # procid → node name
        self.slot_of: dict[int, int] = {}  # procid → its node's place in the step
        self.files: dict[str, BinaryIO] = {}  # the -o/-e files, by expanded name
        self.status: dict[int, int] = {}
        self.counted: dict[int, bool] = {}
        self.killing = False
        self.ctrl_c_sent: float | None = None  # when a double Ctrl-C sent SIGINT
        self.signals: list[int] = []
        self.last_interrupt: float | None = None
        self.job = env.get("SLURM_JOB_ID", "")
        self.step_id = 0

    # ----- setting up ----------------------------------------------------------------------

    def launch(self) -> None:
        hosts = wire.parse_hosts(self.env.get("GPUFLEET_STEP_HOSTS", ""))
        key = wire.step_key()
        me = own_slot(self.env)
        warn: list[str] = []
        layout = plan(self.o, capacities(self.env, len(hosts)), warn)
        for w in warn:
            err(f"warning: {w}")
        used = [i for i, c in enumerate(layout) if c]
        self.remotes = {i: Remote(i, *hosts[i]) for i in used if i != me}
        threads = [
            threading.Thread(target=r.connect, args=(key,), daemon=True)
            for r in self.remotes.values()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = [r for r in self.remotes.values() if r.error]
        if bad:
            self.close()
            raise SrunError(
                f"Unable to create step for job {self.job}: "
                + "; ".join(f"node slot {r.slot} ({r.addr}:{r.port}): {r.error}" for r in bad)
            )
        nodes = {i: r.info for i, r in self.remotes.items()}
        if me in used:
            nodes[me] = node_info(dict(self.env), me)
        self.step_id = next_step_id(self.env)
        base = base_env(self.env, self.o.export)
        base.setdefault("SLURM_UMASK", umask())  # as srun: its own, unless the job set one
        envs = task_envs(
            base,
            layout,
            nodes,
            step_id=self.step_id,
            launch_addr=hosts[me][0] if me < len(hosts) else "",
            o=self.o,
        )
        for slot, tasks in envs.items():
            for p, _ in tasks:
                self.node_of[p] = str(nodes[slot]["name"])
                self.slot_of[p] = slot
        cwd = os.getcwd()
        for slot, r in self.remotes.items():
            common, own = split_common(envs[slot])
            msg = {
                "t": "launch",
                "argv": self.o.command,
                "cwd": cwd,
                "unbuffered": self.o.unbuffered,
                "env": common,
                "tasks": [{"procid": p, "env": e} for p, e in own],
            }
            if r.send(msg):
                threading.Thread(target=r.pump, args=(self.q,), daemon=True).start()
            else:
                self.q.put({"t": "lost", "slot": slot, "why": "the launch could not be sent"})
        for p, e in envs.get(me, []):
            try:
                self.local.start(p, self.o.command, e, cwd)
            except OSError as ex:
                self.q.put({"t": "out", "task": p, "fd": 2, "data": f"srun: {ex}\n"})
                self.q.put({"t": "exit", "task": p, "status": 127})
        self.slot_tasks = {slot: [p for p, _ in tasks] for slot, tasks in envs.items()}

    # ----- running -------------------------------------------------------------------------

    def run(self) -> int:
        ntasks = len(self.node_of)
        width = len(str(ntasks - 1))
        out, errs = sys.stdout.buffer, sys.stderr.buffer
        first_exit: float | None = None
        waited_out = False
        while len(self.status) < ntasks:
            while self.signals:
                self.on_signal(self.signals.pop(0))
            try:
                ev = self.q.get(timeout=0.2)
            except queue.Empty:
                ev = None
            if (
                self.o.wait_s
                and first_exit is not None
                and not waited_out
                and time.monotonic() - first_exit >= self.o.wait_s
            ):
                waited_out = True
                err(f"error: First task exited {self.o.wait_s}s ago")
                self.abort()
            if ev is None:
                continue
            kind = ev["t"]
            if kind == "out":
                data = encode(str(ev.get("data", "")))
                if self.o.label:
                    data = labelled(data, int(ev["task"]), width)
                stream = self.sink(int(ev["task"]), ev.get("fd") == 2, out, errs)
                if stream is None:
                    continue
                try:
                    stream.write(data)
                    stream.flush()
                except OSError:  # a reader gone (`srun … | head`): the step ends, as on SIGPIPE
                    if not self.killing:
                        self.abort()
            elif kind == "exit":
                p = int(ev["task"])
                if p in self.status or p not in self.node_of:
                    continue
                st = int(ev.get("status", 1))
                self.status[p] = st
                # a task srun itself ended (-K, --wait, its stop) is not counted against it
                self.counted[p] = not (self.killing and st < 0)
                if st != 0 and self.counted[p]:  # as srun: said when it happens
                    err(f"error: {self.node_of[p]}: task {p}: {describe(st)}")
                first_exit = first_exit if first_exit is not None else time.monotonic()
                if st != 0 and self.o.kill_on_bad_exit and not self.killing:
                    self.abort()
            elif kind == "lost":
                slot = int(ev["slot"])
                left = [p for p in self.slot_tasks.get(slot, []) if p not in self.status]
                if left:
                    name = self.node_of[left[0]]
                    err(f"error: Node failure on {name} ({ev.get('why') or 'connection lost'})")
                    for p in left:
                        self.status[p] = 1
                        self.counted[p] = True
                    if self.o.kill_on_bad_exit and not self.killing:
                        self.abort()
        return self.report()

    def sink(self, task: int, is_err: bool, out: BinaryIO, errs: BinaryIO) -> BinaryIO | None:
        """Where a task's output goes, as srun's -o/-e say: a file named by the pattern for
        that task (stderr with stdout unless -e names its own), nowhere ("none"), srun's own
        stream for one task id only (a number), or srun's own streams."""
        pattern = self.o.error if is_err and self.o.error is not None else self.o.output
        own = errs if is_err else out
        if pattern is None:
            return own
        if pattern == "none":
            return None
        if pattern.isdigit():
            return own if int(pattern) == task else None
        name = fname.expand(pattern, self.facts(task))
        f = self.files.get(name)
        if f is None:
            try:
                f = self.files[name] = open(name, "ab" if self.o.append else "wb")  # noqa: SIM115
            except OSError as e:
                err(f"error: Could not open stdout file {name}: {e.strerror or e}")
                self.files[name] = f = open(os.devnull, "wb")  # noqa: SIM115
        return f

    def facts(self, task: int) -> fname.FileFacts:
        e = self.env
        index = e.get("SLURM_ARRAY_TASK_ID", "")
        return fname.FileFacts(
            job_id=self.job,
            name=e.get("SLURM_JOB_NAME", ""),
            user=e.get("SLURM_JOB_USER") or e.get("USER", ""),
            node=self.node_of.get(task, ""),
            array_id=e.get("SLURM_ARRAY_JOB_ID") or None,
            array_index=int(index) if index.isdigit() else None,
            step=str(self.step_id),
            task=task,
            node_index=self.slot_of.get(task, 0),
        )

    def abort(self) -> None:
        """End the step: SIGTERM to every task, SIGKILL after the kill wait."""
        self.killing = True
        err(f"Terminating StepId={self.job}.{self.step_id}")
        threading.Thread(target=self.local.terminate, args=(KILL_WAIT_S,), daemon=True).start()
        for r in self.remotes.values():
            r.send({"t": "signal", "sig": int(signal.SIGTERM)})

    def on_signal(self, sig: int) -> None:
        """As srun: one Ctrl-C reports the tasks' states, a second within a second sends
        them SIGINT and ends the step; any other signal is forwarded to every task."""
        if sig != signal.SIGINT:
            self.forward(sig)
            return
        now = time.monotonic()
        if self.ctrl_c_sent is not None and now - self.ctrl_c_sent <= 1.0:
            err("forcing job termination")  # a third within a second: as srun, no more waiting
            self.abort()
            return
        if self.last_interrupt is not None and now - self.last_interrupt <= 1.0:
            # the tasks get SIGINT and end by it; SIGTERM now would race it and win on some
            err(f"sending Ctrl-C to StepId={self.job}.{self.step_id}")
            self.ctrl_c_sent = now
            self.forward(sig)
            return
        self.last_interrupt = now
        err("interrupt (one more within 1 sec to abort)")
        running = [p for p in self.node_of if p not in self.status]
        if running:
            err(f"StepId={self.job}.{self.step_id} tasks {ranges(running)}: running")
        for done, word in ((True, "exited"), (False, "exited abnormally")):
            ids = [p for p, st in self.status.items() if (st == 0) == done]
            if ids:
                err(f"StepId={self.job}.{self.step_id} tasks {ranges(ids)}: {word}")

    def forward(self, sig: int) -> None:
        if sig in (signal.SIGINT, signal.SIGTERM):
            self.killing = True  # the tasks it ends are not failures of their own
        self.local.signal(sig)
        for r in self.remotes.values():
            r.send({"t": "signal", "sig": sig})

    def report(self) -> int:
        """srun's exit code: 128 + the highest signal that ended a task, else the highest
        exit code; tasks srun ended itself count only when nothing else does."""
        counted = [st for p, st in self.status.items() if self.counted.get(p, True)]
        if not counted:
            counted = list(self.status.values())
        signals = [-st for st in counted if st < 0]
        return 128 + max(signals) if signals else max(counted, default=0)

    def close(self) -> None:
        for r in self.remotes.values():
            r.close()
        for f in self.files.values():
            with contextlib.suppress(OSError):
                f.close()


def main(argv: Sequence[str] | None = None) -> int:
    env = os.environ
    if not env.get("SLURM_JOB_ID") or not env.get("GPUFLEET_STEP_HOSTS"):
        print(OUTSIDE, file=sys.stderr)
        return 1
    try:
        o = parse(list(sys.argv[1:] if argv is None else argv), env)
    except SrunError as e:
        if str(e) == "help":
            print(USAGE + "\n(gpufleet's srun: see the README's 'Coming from Slurm')")
            return 0
        if str(e) == "version":
            print("slurm 23.11 (gpufleet)")
            return 0
        err(f"error: {e}")
        print('Try "srun --help" for more information', file=sys.stderr)
        return 1
    for w in o.warnings:
        err(f"warning: {w}")
    step = Step(o, env)
    for sig in FORWARDED:
        signal.signal(sig, lambda n, _f: step.signals.append(n))
    try:
        step.launch()
        return step.run()
    except (SrunError, wire.WireError) as e:
        err(f"error: {e}")
        return 1
    finally:
        step.close()


if __name__ == "__main__":
    sys.exit(main())
