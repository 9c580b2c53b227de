"""The server's part of the service data path: the core's ``Routes`` onto a real gateway.

``ServiceGateway`` keeps the whole set of routes (a gateway's ``apply`` replaces it whole), maps
each backend's node to the address its agent registered, and gives each service its endpoint
(``EndpointBook``: a port and a token, stable across restarts). It works on the controller's
event loop and never waits on the proxy: it hands each new set of routes to the proxy's own
thread (``GatewayWorker``: applies in order, the newest of those queued only, and start, stop,
counters), which says through a future when the apply is done. The proxy starts with the first
service (a cluster without services runs none) and stops with the server.

A service's endpoint opens when the service is created (its first ``ServiceRecord``; at a
restart, every restored service: ``open``), with no backend until a replica is ready: its
clients get 503 from the proxy, not a refused connection.

Order: the core sends a service's ``Routes`` before the ``Kill`` of a replica that leaves them.
``WithGateway`` hands the routes on at once, in the driver's step, and holds such a Kill back
until the apply that took the replica out has finished (or failed: logged, killed all the
same) and ``drain_s`` (2 s) more have passed: the proxy sends the replica nothing new, and the
requests it still serves get that long to finish before the SIGTERM. Every other command goes
out at once, in its order.

Load: ``sample(now)`` reads the gateway's request counters (on the proxy's thread) and gives a
``ServiceLoad`` (the rate since the previous sample) per service; a counter that went down was
reset (a restarted proxy) and counts from 0. The rate counts the requests the endpoint served:
those refused for a bad token are not load (the autoscaler would scale for them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Protocol

from gpufleet.core.commands import Command, Kill, RouteBackend, Routes, ServiceRecord
from gpufleet.core.events import ServiceLoad
from gpufleet.gateway import Backend, ConfigError, Gateway, ServiceRoute, ServiceStats
from gpufleet.server.endpoints import Endpoint, EndpointBook
from gpufleet.server.gateway_worker import GatewayWorker

log = logging.getLogger("gpufleet.gateway")

DRAIN_S = 2.0
STATS_S = 5.0
STOP_WAIT_S = 60.0  # an apply under way (nginx: up to its reload wait) and the stop itself


class Link(Protocol):
    address: str


class Executor(Protocol):
    def apply(self, commands: Sequence[Command]) -> None: ...


# (delay in seconds, what to do then), called on the server's event loop: its ``call_later``
Defer = Callable[[float, Callable[[], None]], object]
# what to do on the server's event loop, soon, called from any thread (the proxy's): the
# loop's ``call_soon_threadsafe``
Hop = Callable[[Callable[[], None]], object]


def _host(address: str) -> str:
    """An agent's address as a proxy's backend host (an IPv6 literal in brackets)."""
    if ":" in address and not address.startswith("["):
        return f"[{address}]"
    return address


def _done() -> Future[None]:
    fut: Future[None] = Future()
    fut.set_result(None)
    return fut


class ServiceGateway:
    """Touched on the controller's loop only (the book, the routes); the proxy is the
    worker's."""

    def __init__(
        self,
        gateway: Gateway,
        book: EndpointBook,
        links: Mapping[str, Link],
        *,
        drain_s: float = DRAIN_S,
        stats_s: float = STATS_S,
    ) -> None:
        self.gateway = gateway
        self.worker = GatewayWorker(gateway)
        self.book = book
        self.links = links
        self.drain_s = drain_s
        self.stats_s = stats_s
        self.routes: dict[str, tuple[Backend, ...]] = {}  # service → its ready backends
        self._ready: dict[str, tuple[RouteBackend, ...]] = {}  # service → as the core said
        self._last: dict[str, tuple[float, int]] = {}  # service → (time, served) sampled
        # the newest apply handed to the worker: done once the proxy serves it (or failed)
        self.applied: Future[None] = _done()
        # service → the replicas the proxy sends requests to: those of the newest apply that
        # succeeded (set from the worker's thread, whole, so a reader sees one or the other)
        self.serving: Mapping[str, frozenset[str]] = {}
        self._routed: dict[str, frozenset[str]] = {}  # service → replicas of ``routes``
        self._seq = self._served_seq = 0
        self._retry = False  # the newest apply failed, and not for its config: again
        # a desktop service's viewers: the SHA-256 of each token that may open it (set by the
        # controller service; () for an ordinary service, let in by its endpoint's token)
        self.viewers: Callable[[str], tuple[str, ...]] = lambda name: ()
        # a desktop replica's key (service, job id → hex; "" for an ordinary service's): the
        # proxy presents it, and the session lets in no connection without it (ADR 0047)
        self.keys: Callable[[str, str], str] = lambda name, job: ""

    @property
    def started(self) -> bool:
        """The proxy runs (as of its last start or stop)."""
        return self.worker.started

    @property
    def errors(self) -> int:
        """Applies the proxy refused (the old config went on serving)."""
        return self.worker.errors

    # ----- the proxy ------------------------------------------------------------------------

    def endpoint(self, name: str) -> Endpoint | None:
        """Where a service's clients connect (its port on ``gateway.bind_host``) and the
        token they present (``Authorization: Bearer …``); None for no such service."""
        return self.book.get(name) if name in self.routes else None

    def stop(self) -> None:
        """Stop the proxy once the applies handed on have run; waits (call it off the loop,
        or at the end). A later change starts it again."""
        self.worker.stop(STOP_WAIT_S)

    def open(
        self,
        names: Iterable[str],
        ready: Callable[[str], tuple[RouteBackend, ...]] | None = None,
    ) -> None:
        """Each of these services gets its endpoint now, with the backends ``ready`` names
        (none: clients get 503, not a refused connection, until its first Routes): at its
        creation, and for every service at a restart or a takeover, whose first apply so
        routes to the replicas the store says are ready, not to none (a gateway process
        that served them under the old leader goes on). One already served keeps its
        routes."""
        new = [n for n in names if n not in self.routes]
        for name in new:
            self.book.endpoint(name)  # made at the service's creation, kept across restarts
            self._set(name, ready(name) if ready is not None else ())
        if new:
            self._apply()

    def on_routes(self, c: Routes) -> set[str]:
        """Serve ``c``'s backends from now on (``applied`` says when the proxy does); the
        replicas that left the routes."""
        before = {b.job_id for b in self._ready.get(c.service, ())}
        self.book.endpoint(c.service)  # made at the service's creation (if not yet)
        self._set(c.service, c.backends)
        self._apply()
        return before - {b.job_id for b in c.backends}

    def _set(self, service: str, ready: tuple[RouteBackend, ...]) -> None:
        self._ready[service] = ready
        backends = []
        routed = set()
        for b in ready:
            link = self.links.get(b.node)
            if link is None:  # its agent never registered with this process: not reachable
                log.warning("service %s: no address for node %s of %s", service, b.node, b.job_id)
                continue
            backends.append(Backend(_host(link.address), b.port, key=self.keys(service, b.job_id)))
            routed.add(b.job_id)
        self.routes[service] = tuple(dict.fromkeys(backends))
        self._routed[service] = frozenset(routed)

    def rotate(self, name: str) -> Endpoint:
        """A new token for ``name``'s endpoint, served from the proxy's next apply (now)."""
        e = self.book.rotate(name)
        if name in self.routes:
            self._apply()
        return e

    def viewers_changed(self) -> None:
        """A token was made or revoked: a desktop's viewers may differ (a revoked token is
        refused from the proxy's next apply, now)."""
        if self.routes:
            self._apply()

    def forget(self, name: str) -> None:
        """The service is gone: its endpoint closes and its port and token are freed."""
        self._ready.pop(name, None)
        self._last.pop(name, None)
        self._routed.pop(name, None)
        if self.routes.pop(name, None) is not None:
            self._apply()
        self.book.forget(name)

    def _apply(self) -> None:
        """The whole set to the proxy's thread; a failure is logged there (the old config
        serves on; the next change, or a restart, tries again)."""
        routes = []
        for name in sorted(self.routes):
            e = self.book.endpoint(name)
            viewers = self.viewers(name)
            routes.append(ServiceRoute(name, e.port, e.token, self.routes[name], viewers))
        self.applied = self.worker.apply(routes)
        self._seq += 1
        seq, snapshot = self._seq, dict(self._routed)
        self.applied.add_done_callback(lambda f: self._served(seq, snapshot, f))

    def _served(self, seq: int, routed: dict[str, frozenset[str]], f: Future[None]) -> None:
        """An apply finished (on the worker's thread): what it routes is served now, unless
        it failed or a newer one finished first."""
        if f.cancelled():
            return
        e = f.exception()
        if e is None and seq > self._served_seq:
            self._served_seq = seq
            self.serving = routed
        elif e is not None and not isinstance(e, ConfigError) and seq == self._seq:
            # not a refusal of the config (a proxy that did not reload in time, a gateway
            # process that did not answer): the next sample applies the same set again
            self._retry = True

    # ----- load -----------------------------------------------------------------------------

    async def sample(self, now: float) -> list[ServiceLoad]:
        """Each routed service's rate of served requests since the previous sample (none at
        the first); the counters are read on the proxy's thread."""
        if self._retry:
            self._retry = False
            self._apply()
        try:
            stats = await asyncio.wrap_future(self.worker.stats())
        except Exception as e:
            log.warning("could not read the gateway's counters: %s", e)
            return []
        return self.loads(stats, now)

    def loads(self, stats: Mapping[str, ServiceStats], now: float) -> list[ServiceLoad]:
        """The rates from counters read at ``now``: requests less those the token check
        refused (not load: the autoscaler would scale up for a client with a bad token)."""
        out = []
        for name in sorted(self.routes):
            st = stats.get(name)
            if st is None:
                continue
            served = st.requests - st.unauthorized
            last = self._last.get(name)
            self._last[name] = (now, served)
            if last is None or now <= last[0]:
                continue
            t0, n0 = last
            done = served - n0 if served >= n0 else served  # a reset: from 0
            out.append(ServiceLoad(name, done / (now - t0), now, st.connections))
        return out


class WithGateway:
    """The driver's executor: Routes and a service's records to the gateway, in order; the
    rest to the agents' executor at once, but the Kill of a replica just out of the routes
    once the proxy applied them (``hop``: back on the loop) and ``drain_s`` later
    (``defer``)."""

    def __init__(self, agents: Executor, gateway: ServiceGateway, defer: Defer, hop: Hop) -> None:
        self.agents = agents
        self.gateway = gateway
        self.defer = defer
        self.hop = hop

    def apply(self, commands: Sequence[Command]) -> None:
        now: list[Command] = []
        leaving: dict[str, Future[None]] = {}  # replica → the apply that took it out
        for c in commands:
            if isinstance(c, Routes):
                for job_id in self.gateway.on_routes(c):
                    leaving[job_id] = self.gateway.applied
            elif isinstance(c, ServiceRecord):
                if c.record is None:
                    self.gateway.forget(c.service)
                else:  # a new service's endpoint opens (a known one's is left as it is)
                    self.gateway.open([c.service])
            elif isinstance(c, Kill) and c.job_id in leaving:
                self._hold(c, leaving[c.job_id])
            else:
                now.append(c)
        if now:
            self.agents.apply(now)

    def _hold(self, kill: Kill, applied: Future[None]) -> None:
        """``kill`` once ``applied`` is done and the drain has passed, on the loop."""

        def on_loop() -> None:
            e = applied.exception()
            if e is not None:
                log.warning(
                    "%s leaves the routes of a failed apply (%s): killed after the drain",
                    kill.job_id,
                    e,
                )
            if self.gateway.drain_s > 0:
                self.defer(self.gateway.drain_s, lambda: self.agents.apply([kill]))
            else:
                self.agents.apply([kill])

        # on the worker's thread (or here, at once, if it is done already)
        applied.add_done_callback(lambda _: self.hop(on_loop))
