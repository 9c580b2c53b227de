"""The built-in gateway: a small asyncio HTTP/1.1 reverse proxy, for when neither HAProxy nor
nginx is installed (the demo). It runs on its own event loop thread in this process.

What it does: one listener per service; the bearer token checked before anything reaches a
backend; weighted round-robin over the backends; bodies streamed both ways (Content-Length,
chunked, or until close); idle backend connections kept for reuse; a request whose backend
refused the connection goes to the next backend (it was never sent, so that is safe for any
method); a request on a reused backend connection that turns out closed is retried once on a
new one when it has no body. ``apply`` swaps the backend list in place: connections already
open keep going.
An Upgrade (WebSocket) request gets a new backend connection of its own and, on the backend's
101, bytes both ways until one side closes. A desktop's route (``viewers``) lets in its
viewers' own tokens and serves their login page (``desktop_gate.py``).
Not done: HTTP/2, a timeout on a backend that accepted but does not answer.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from gpufleet.base.aiotasks import end_other_tasks
from gpufleet.gateway import desktop_gate
from gpufleet.gateway.base import Gateway, ServiceStats
from gpufleet.gateway.http1 import (
    HEAD_LIMIT,
    BadRequest,
    Head,
    copy_body,
    has_body,
    read_head,
    simple,
)
from gpufleet.gateway.routes import (
    KEY_HEADER,
    Backend,
    ConfigError,
    GatewayError,
    ServiceRoute,
    validate,
)

POOL_PER_BACKEND = 64
IDLE_S = 60.0  # a client connection with no request head for this long is closed
CONNECT_S = 2.0  # a backend that does not accept within this is skipped like a refusing one
HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"upgrade",
    b"expect",
    KEY_HEADER.lower().encode(),  # a client's own: only the proxy presents a backend's key
}
T = TypeVar("T")


@dataclass
class _Counters:
    requests: int = 0
    s4xx: int = 0
    s5xx: int = 0
    unauthorized: int = 0  # refused by the token check (among requests and s4xx)
    open: int = 0  # client connections open now


@dataclass
class _Listener:
    route: ServiceRoute
    server: asyncio.Server
    next: int = 0
    counters: _Counters = field(default_factory=_Counters)
    order: tuple[Backend, ...] = ()

    def __post_init__(self) -> None:
        self.set_route(self.route)

    def set_route(self, route: ServiceRoute) -> None:
        """Swap the backends in place; the round-robin order repeats each by its weight,
        interleaved (weights 2 and 1: a b a, not a a b)."""
        self.route = route
        top = max((b.weight for b in route.backends), default=0)
        self.order = tuple(b for w in range(top) for b in route.backends if b.weight > w)


_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class BuiltinGateway(Gateway):
    kind = "builtin"

    def __init__(self, bind_host: str = "127.0.0.1") -> None:
        super().__init__(bind_host)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.listeners: dict[str, _Listener] = {}
        self.pool: dict[str, list[_Conn]] = {}

    # -- the thread and the loop ---------------------------------------------------------
    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="gpufleet-gateway", daemon=True
        )
        self.thread.start()

    def _run(self, coro: Awaitable[T]) -> T:
        if self.loop is None:
            raise GatewayError("built-in gateway not started")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)  # type: ignore[arg-type]

    def apply(self, services: list[ServiceRoute]) -> None:
        validate(services)
        self._run(self._apply(services))

    def stats(self) -> dict[str, ServiceStats]:
        """Read on the proxy's own loop, which alone counts: a refused request's ``requests``
        and ``unauthorized`` are seen together (``requests - unauthorized`` never goes down)."""
        return self._run(self._stats())

    async def _stats(self) -> dict[str, ServiceStats]:
        return {
            name: ServiceStats(c.requests, c.s4xx, c.s5xx, c.unauthorized, c.open)
            for name, c in ((n, lst.counters) for n, lst in self.listeners.items())
        }

    def stop(self) -> None:
        if self.loop is None:
            return
        self._run(self._close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self.thread is not None:
            self.thread.join(timeout=5)
        if self.thread is None or not self.thread.is_alive():
            self.loop.close()
        self.loop = None

    async def _close_all(self) -> None:
        for lst in self.listeners.values():
            lst.server.close()
        for conns in self.pool.values():
            for _, w in conns:
                w.close()
        self.listeners.clear()
        self.pool.clear()
        await end_other_tasks()  # the connections still open end here, on their loop

    async def _apply(self, services: list[ServiceRoute]) -> None:
        # open every new listener first: a port that cannot be bound leaves the old set serving
        opened: dict[str, asyncio.Server] = {}
        for s in services:
            old = self.listeners.get(s.name)
            if old is not None and old.route.listen_port == s.listen_port:
                continue
            try:
                opened[s.name] = await asyncio.start_server(
                    self._client_cb(s.name), self.bind_host, s.listen_port, limit=HEAD_LIMIT
                )
            except OSError as e:
                for server in opened.values():
                    server.close()
                raise ConfigError(
                    f"service {s.name!r}: cannot listen on {self.bind_host}:{s.listen_port}: {e}"
                    " (old config still serving)"
                ) from e
        wanted = {s.name: s for s in services}
        counters = {n: lst.counters for n, lst in self.listeners.items()}
        for name in list(self.listeners):
            if name not in wanted or name in opened:
                # stop accepting; connections already open finish on their own
                self.listeners.pop(name).server.close()
        for name, s in wanted.items():
            if name in opened:
                self.listeners[name] = _Listener(s, opened[name])
                if name in counters:  # a new port: the service's counters go on
                    self.listeners[name].counters = counters[name]
            else:
                self.listeners[name].set_route(s)
        live = {b.address for s in services for b in s.backends}
        for address in [a for a in self.pool if a not in live]:
            for _, w in self.pool.pop(address):
                w.close()

    # -- one client connection -----------------------------------------------------------
    def _client_cb(
        self, name: str
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def cb(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            lst = self.listeners.get(name)
            counters = lst.counters if lst is not None else _Counters()
            counters.open += 1
            try:
                await self._serve(name, reader, writer)
            except (OSError, asyncio.IncompleteReadError, BadRequest, ValueError):
                pass
            finally:
                counters.open -= 1
                writer.close()

        return cb

    async def _serve(
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        while True:
            try:
                head = await asyncio.wait_for(read_head(reader), IDLE_S)
            except TimeoutError:
                return
            if head is None:
                return
            lst = self.listeners.get(name)
            if lst is None:  # the service was removed: this connection still has its answer
                writer.write(simple(503, "Service Unavailable"))
                await writer.drain()
                return
            route = lst.route
            if route.desktop:  # a viewer's own token; the login page (desktop_gate.py)
                checked, refused = await desktop_gate.gate(route, head, reader, writer)
                lst.counters.requests += 1
                if checked is None:
                    lst.counters.s4xx += refused
                    lst.counters.unauthorized += refused  # no await since requests += 1
                    return
                head = checked
            else:
                lst.counters.requests += 1
            want = f"Bearer {route.token}".encode()
            if not route.desktop and not hmac.compare_digest(
                head.get(b"authorization") or b"", want
            ):
                lst.counters.s4xx += 1
                lst.counters.unauthorized += 1  # no await since requests += 1: read as one
                realm = f'www-authenticate: Bearer realm="{route.name}"\r\n'
                writer.write(simple(401, "Unauthorized", realm))
                await writer.drain()
                return
            parts = head.first.split(b" ")
            if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
                raise BadRequest("bad request line")
            client_keep = parts[2] == b"HTTP/1.1" and b"close" not in head.tokens(b"connection")
            if route.desktop and not lst.order:  # starting: a page that reloads itself
                writer.write(desktop_gate.starting(route))
                await writer.drain()
                return
            if b"upgrade" in head.tokens(b"connection") and lst.order:
                host = peer[0] if isinstance(peer, tuple) else "unknown"
                lst.next += 1
                status = await desktop_gate.tunnel(
                    lst.order, lst.next - 1, head, HOP, str(host).encode(), reader, writer
                )
                lst.counters.s4xx += 400 <= status < 500
                lst.counters.s5xx += status >= 500
                return
            if b"100-continue" in head.tokens(b"expect"):
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            status, keep = await self._forward(lst, head, parts[0], peer, reader, writer)
            if status >= 500:
                lst.counters.s5xx += 1
            elif status >= 400:
                lst.counters.s4xx += 1
            if not (client_keep and keep):
                return

    async def _forward(
        self,
        lst: _Listener,
        head: Head,
        method: bytes,
        peer: object,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> tuple[int, bool]:
        """Send one request to a backend and its answer back: (status, client may keep-alive)."""
        backends = lst.order
        out_head = [head.first]
        for k, v in head.headers:
            if k.lower() not in HOP:
                out_head.append(k + b": " + v)
        host = peer[0] if isinstance(peer, tuple) else "unknown"
        out_head += [b"X-Forwarded-For: " + str(host).encode(), b"Connection: keep-alive"]
        body = has_body(head)
        conn: _Conn | None = None
        resp: Head | None = None
        for _attempt in range(len(lst.route.backends) + 1):
            if not backends:
                break
            b = backends[lst.next % len(backends)]
            lst.next += 1
            conn, reused = await self._connect(b)
            if conn is None:
                continue  # refused: never sent, try the next backend
            br, bw = conn
            try:
                bw.write(b"\r\n".join(out_head + desktop_gate.key_line(b)) + b"\r\n\r\n")
                if body:
                    await copy_body(head, reader, bw, until_close=False)
                await bw.drain()
                resp = await read_head(br)
                while resp is not None and resp.first[9:10] == b"1":
                    resp = await read_head(br)  # interim 1xx: we answered 100-continue already
            except (OSError, asyncio.IncompleteReadError, BadRequest):
                resp = None
            if resp is None:
                bw.close()
                if reused and not body:
                    lst.next -= 1  # a stale pooled connection: same backend, new connection
                    continue
                writer.write(simple(502, "Bad Gateway"))
                await writer.drain()
                return 502, False
            break
        if resp is None or conn is None:
            writer.write(simple(503 if not backends else 502, "Service Unavailable"))
            await writer.drain()
            return 503, False
        br, bw = conn
        status = int(resp.first.split(b" ")[1])
        no_body = method == b"HEAD" or status in (204, 304)
        delimited = no_body or has_body(resp) or resp.get(b"content-length") is not None
        back_keep = delimited and b"close" not in resp.tokens(b"connection")
        lines = [resp.first] + [k + b": " + v for k, v in resp.headers if k.lower() not in HOP]
        lines.append(b"Connection: keep-alive" if delimited else b"Connection: close")
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
        if not no_body:
            await copy_body(resp, br, writer, until_close=not delimited)
        await writer.drain()
        if back_keep:
            self._release(b.address, conn)
        else:
            bw.close()
        return status, delimited

    async def _connect(self, b: Backend) -> tuple[_Conn | None, bool]:
        idle = self.pool.get(b.address)
        while idle:
            r, w = idle.pop()
            if not r.at_eof() and not w.is_closing():
                return (r, w), True
            w.close()
        try:
            r, w = await asyncio.wait_for(
                asyncio.open_connection(b.host, b.port, limit=HEAD_LIMIT), CONNECT_S
            )
        except (OSError, TimeoutError):
            return None, False
        return (r, w), False

    def _release(self, address: str, conn: _Conn) -> None:
        idle = self.pool.setdefault(address, [])
        if len(idle) < POOL_PER_BACKEND and any(
            b.address == address for lst in self.listeners.values() for b in lst.route.backends
        ):
            idle.append(conn)
        else:
            conn[1].close()
