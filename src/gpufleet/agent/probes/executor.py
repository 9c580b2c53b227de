"""Probes run in a bounded pool of threads, so one that hangs holds one worker for at most its
own timeout and the others go on; ``tick`` is one turn of the agent's loop over the book; and
``free_port``, the port a replica is given."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpufleet.agent.probes.book import Due, ProbeResult, Probes, ProbeTarget, ReplicaProbe
from gpufleet.agent.probes.run import run_probe, short
from gpufleet.base.clock import Clock, MonotonicClock
from gpufleet.model.service import Probe


class ProbeExecutor:
    """Runs probes in a bounded pool of threads. ``submit`` never blocks; ``completed``
    returns what has finished since (never blocks either). Each probe holds a worker for at
    most its timeout (and the moment a killed group takes to go), so with more workers than
    probes hanging at once no probe waits for another."""

    def __init__(
        self,
        clock: Clock | None = None,
        max_workers: int = 32,
        run: Callable[[Probe, ProbeTarget], tuple[bool, str]] = run_probe,
    ) -> None:
        self.clock = clock or MonotonicClock()
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="probe")
        self._done: queue.SimpleQueue[ProbeResult] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()

    def submit(self, due: Due) -> None:
        with self._lock:
            self._pending += 1
        self._pool.submit(self._one, due)

    def _one(self, due: Due) -> None:
        try:
            ok, why = self._run(due.probe, due.target)
        except Exception as e:
            ok, why = False, short(f"probe error: {type(e).__name__}: {e}")
        self._done.put(ProbeResult(due.key, due.kind, due.token, ok, why, self.clock.now()))

    def completed(self, wait_s: float = 0.0) -> list[ProbeResult]:
        """What finished, in the order it finished; waits up to ``wait_s`` for the first."""
        out = []
        try:
            out.append(self._done.get(timeout=wait_s) if wait_s > 0 else self._done.get_nowait())
            while True:
                out.append(self._done.get_nowait())
        except queue.Empty:
            pass
        with self._lock:
            self._pending -= len(out)
        return out

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)


def tick(probes: Probes, executor: ProbeExecutor, now: float) -> list[ReplicaProbe]:
    """One turn of the agent's loop: start what is due, take what finished; the records to
    report. (The caller holds whatever lock guards ``probes``; nothing here blocks.)"""
    for d in probes.due(now):
        executor.submit(d)
    return probes.results(executor.completed())


# ----- a replica's port ----------------------------------------------------------------------


def free_port(address: str = "") -> int:
    """A TCP port free on this node now: bind port 0, read what the kernel chose, release it.

    ``address`` "" (the default) binds the wildcard, which conflicts with a listener on any
    address, so the port is free on the agent's address and on every other: a replica that
    listens on 0.0.0.0 (most servers' default) needs that. A specific address checks that one.

    The race (someone binds the port between this release and the replica's own bind) is
    accepted: the kernel hands bind(0) ports out spread over its ephemeral range, so the window
    is small, and its cost is bounded — the replica fails to bind and exits, or never becomes
    ready or live, and the controller replaces it with a new attempt."""
    family: socket.AddressFamily = socket.AF_INET
    sockaddr: Any = ("0.0.0.0", 0)
    if address:
        infos = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind(sockaddr)
        return int(s.getsockname()[1])
