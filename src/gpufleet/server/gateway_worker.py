"""The one thread that works the proxy, so that the controller's event loop never waits on it.

A gateway's calls block: nginx's ``apply`` writes the config, reloads and waits until the old
workers stop accepting (seconds on a busy machine), HAProxy's reloads through its master, and
``stats`` reads files. On the controller's loop that stalled the agents' heartbeats past their
lease, and the agents fenced healthy replicas. So ``GatewayWorker`` owns the ``Gateway``: every
call (start, apply, stats, stop) runs on its thread, one at a time, in the order asked.

Latest wins: an apply replaces the whole set of routes, so of the applies queued and not yet
begun only the newest runs; each caller's future tells when an apply holding its routes (or
newer ones) has finished: a result of None, or the apply's exception. The proxy starts before
the first apply, and ``stop()`` stops it and ends the thread (a later call starts a new one).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from gpufleet.gateway import Gateway, ServiceRoute, ServiceStats

log = logging.getLogger("gpufleet.gateway")

T = TypeVar("T")


class GatewayWorker:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.started = False  # the proxy runs (set on the worker's thread)
        self.applies = 0  # applies run (coalesced ones count once)
        self.errors = 0  # applies that failed (the old config went on serving)
        self._lock = threading.Condition()
        self._jobs: deque[Callable[[], bool]] = deque()  # each: True to end the thread
        self._thread: threading.Thread | None = None
        self._routes: list[ServiceRoute] = []  # the newest routes asked for
        self._waiting: list[Future[None]] = []  # who waits for an apply not yet begun
        self._apply_queued = False

    # ----- from any thread ------------------------------------------------------------------

    def apply(self, routes: list[ServiceRoute]) -> Future[None]:
        """Serve ``routes`` (the whole set) soon; done once an apply of these or newer routes
        has finished (its exception if it failed)."""
        fut: Future[None] = Future()
        with self._lock:
            self._routes = list(routes)
            self._waiting.append(fut)
            if not self._apply_queued:
                self._apply_queued = True
                self._push(self._apply_newest)
        return fut

    def stats(self) -> Future[dict[str, ServiceStats]]:
        """The proxy's counters per service (none while it does not run)."""
        with self._lock:
            if self._thread is None:  # nothing queued, no proxy (none yet, or stopped)
                done: Future[dict[str, ServiceStats]] = Future()
                done.set_result({})
                return done
        return self._call(lambda: self.gateway.stats() if self.started else {})

    def stop(self, timeout: float | None = None) -> None:
        """Stop the proxy once what is queued before has run, and end the thread; wait."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._push(self._stop)
        thread.join(timeout)

    # ----- the worker's thread --------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> Future[T]:
        fut: Future[T] = Future()

        def job() -> bool:
            if not fut.set_running_or_notify_cancel():
                return False  # the caller gave up (a sampler cancelled at shutdown)
            try:
                fut.set_result(fn())
            except Exception as e:
                fut.set_exception(e)
            return False

        with self._lock:
            self._push(job)
        return fut

    def _push(self, job: Callable[[], bool]) -> None:
        """Queue ``job`` (the lock held), starting the thread if none runs."""
        self._jobs.append(job)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpufleet-gateway", daemon=True)
            self._thread.start()
        self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._jobs:
                    self._lock.wait()
                job = self._jobs.popleft()
            try:
                end = job()
            except Exception:  # a bug must not kill the thread every later call waits on
                log.exception("the gateway's worker failed")
                end = False
            if end:
                with self._lock:
                    if not self._jobs:  # else a call came after the stop: go on serving it
                        self._thread = None
                        return

    def _apply_newest(self) -> bool:
        with self._lock:
            routes, waiting = self._routes, self._waiting
            self._waiting, self._apply_queued = [], False
        error: Exception | None = None
        try:
            if not self.started:
                self.gateway.start()
                self.started = True
            self.gateway.apply(routes)
        except Exception as e:  # the old config serves on; the next apply tries again
            error = e
            self.errors += 1
            log.error("the gateway refused the service routes: %s", e)
        self.applies += 1
        for fut in waiting:
            if not fut.set_running_or_notify_cancel():
                continue  # its caller gave up waiting
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
        return False

    def _stop(self) -> bool:
        if self.started:
            self.started = False
            try:
                self.gateway.stop()
            except Exception:
                log.exception("stopping the gateway failed")
        return True
