"""The server's part of the service data path: the core's ``Routes`` onto a real gateway.

``ServiceGateway`` keeps the whole set of routes (a gateway's ``apply`` replaces it whole), maps
each backend's node to the address its agent registered, and gives each service its endpoint
(``EndpointBook``: a port and a token, stable across restarts). The proxy starts with the first
service (a cluster without services runs none) and stops with the server.

Order: the core sends a service's ``Routes`` before the ``Kill`` of a replica that leaves them.
``WithGateway`` applies the routes at once, in the driver's step, and holds such a Kill back
for ``drain_s`` (2 s): the proxy sends the replica nothing new, and the requests it still
serves get that long to finish before the SIGTERM. A Kill of any other job goes out at once.

Load: ``sample(now)`` reads the gateway's request counters and gives a ``ServiceLoad`` (the
rate since the previous sample) per service; a counter that went down was reset (a restarted
proxy) and counts from 0. The rate counts every request the endpoint received, those refused
for a bad token among them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpufleet.core.commands import Command, Kill, RouteBackend, Routes, ServiceRecord
from gpufleet.core.events import ServiceLoad
from gpufleet.gateway import Backend, Gateway, GatewayError, ServiceRoute
from gpufleet.server.endpoints import Endpoint, EndpointBook

log = logging.getLogger("gpufleet.gateway")

DRAIN_S = 2.0
STATS_S = 5.0


class Link(Protocol):
    address: str


class Executor(Protocol):
    def apply(self, commands: Sequence[Command]) -> None: ...


# (delay in seconds, what to do then): the server's event loop's ``call_later``
Defer = Callable[[float, Callable[[], None]], object]


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    kind: str | None = None  # haproxy, nginx, builtin; None: the first installed
    bind_host: str = "127.0.0.1"
    drain_s: float = DRAIN_S
    stats_s: float = STATS_S

    def __post_init__(self) -> None:
        if not 0 <= self.drain_s <= 600:
            raise ValueError(f"gateway drain: need 0 to 600 s, got {self.drain_s!r}")
        if not 0 < self.stats_s <= 3600:
            raise ValueError(f"gateway stats interval: need 0 to 3600 s, got {self.stats_s!r}")


def _host(address: str) -> str:
    """An agent's address as a proxy's backend host (an IPv6 literal in brackets)."""
    if ":" in address and not address.startswith("["):
        return f"[{address}]"
    return address


class ServiceGateway:
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
        self.book = book
        self.links = links
        self.drain_s = drain_s
        self.stats_s = stats_s
        self.routes: dict[str, tuple[Backend, ...]] = {}  # service → its ready backends
        self._ready: dict[str, tuple[RouteBackend, ...]] = {}  # service → as the core said
        self.started = False
        self.errors = 0  # applies the proxy refused (the old config went on serving)
        self._last: dict[str, tuple[float, int]] = {}  # service → (time, requests) sampled

    # ----- the proxy ------------------------------------------------------------------------

    def endpoint(self, name: str) -> Endpoint | None:
        """Where a service's clients connect (its port on ``gateway.bind_host``) and the
        token they present (``Authorization: Bearer …``); None for no such service."""
        return self.book.get(name) if name in self.routes else None

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.gateway.stop()

    def on_routes(self, c: Routes) -> set[str]:
        """Serve ``c``'s backends from now on; the replicas that left the routes."""
        before = {b.job_id for b in self._ready.get(c.service, ())}
        self._ready[c.service] = c.backends
        self.book.endpoint(c.service)  # made at the service's first routes: its creation
        backends = []
        for b in c.backends:
            link = self.links.get(b.node)
            if link is None:  # its agent never registered with this process: not reachable
                log.warning("service %s: no address for node %s of %s", c.service, b.node, b.job_id)
                continue
            backends.append(Backend(_host(link.address), b.port))
        self.routes[c.service] = tuple(dict.fromkeys(backends))
        self._apply()
        return before - {b.job_id for b in c.backends}

    def rotate(self, name: str) -> Endpoint:
        """A new token for ``name``'s endpoint, served from the proxy's next apply (now)."""
        e = self.book.rotate(name)
        if name in self.routes:
            self._apply()
        return e

    def forget(self, name: str) -> None:
        """The service is gone: its endpoint closes and its port and token are freed."""
        self._ready.pop(name, None)
        self._last.pop(name, None)
        if self.routes.pop(name, None) is not None:
            self._apply()
        self.book.forget(name)

    def _apply(self) -> None:
        routes = []
        for name in sorted(self.routes):
            e = self.book.endpoint(name)
            routes.append(ServiceRoute(name, e.port, e.token, self.routes[name]))
        try:
            if not self.started:
                self.gateway.start()
                self.started = True
            self.gateway.apply(routes)
        except GatewayError as e:
            # the old config serves on; the next change (or restart) tries again
            self.errors += 1
            log.error("the gateway refused the service routes: %s", e)

    # ----- load -----------------------------------------------------------------------------

    def sample(self, now: float) -> list[ServiceLoad]:
        """Each routed service's request rate since the previous sample (none at the first)."""
        if not self.started:
            return []
        try:
            stats = self.gateway.stats()
        except GatewayError as e:
            log.warning("could not read the gateway's counters: %s", e)
            return []
        out = []
        for name in sorted(self.routes):
            st = stats.get(name)
            if st is None:
                continue
            last = self._last.get(name)
            self._last[name] = (now, st.requests)
            if last is None or now <= last[0]:
                continue
            t0, n0 = last
            done = st.requests - n0 if st.requests >= n0 else st.requests  # a reset: from 0
            out.append(ServiceLoad(name, done / (now - t0), now))
        return out


class WithGateway:
    """The driver's executor: Routes and a gone service's record to the gateway, in order; the
    rest to the agents' executor, the Kill of a replica just out of the routes ``drain_s``
    later (``defer``)."""

    def __init__(self, agents: Executor, gateway: ServiceGateway, defer: Defer) -> None:
        self.agents = agents
        self.gateway = gateway
        self.defer = defer

    def apply(self, commands: Sequence[Command]) -> None:
        now: list[Command] = []
        leaving: set[str] = set()
        for c in commands:
            if isinstance(c, Routes):
                leaving |= self.gateway.on_routes(c)
            elif isinstance(c, ServiceRecord):
                if c.record is None:
                    self.gateway.forget(c.service)
            elif isinstance(c, Kill) and c.job_id in leaving and self.gateway.drain_s > 0:
                self._later([*now, c], keep=len(now))
                now = []
            else:
                now.append(c)
        if now:
            self.agents.apply(now)

    def _later(self, batch: list[Command], keep: int) -> None:
        """Send what came before the Kill now (order kept), the Kill after the drain."""
        if keep:
            self.agents.apply(batch[:keep])
        kill = batch[keep]
        self.defer(self.gateway.drain_s, lambda: self.agents.apply([kill]))
