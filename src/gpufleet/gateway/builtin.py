"""The built-in gateway: a small asyncio HTTP/1.1 reverse proxy, for when neither HAProxy nor
nginx is installed (the demo). It runs on its own event loop thread in this process.

What it does: one listener per service; the bearer token checked before anything reaches a
backend; weighted round-robin over the backends; bodies streamed both ways (Content-Length,
chunked, or until close); idle backend connections kept for reuse; a request whose backend
refused the connection goes to the next backend (it was never sent, so that is safe for any
method); a request on a reused backend connection that turns out closed is retried once on a
new one when it has no body. ``apply`` swaps the backend list in place: connections already
open keep going.
Not done: HTTP/2, Upgrade (WebSocket), a timeout on a backend that accepted but does not answer.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from gpufleet.gateway.base import Gateway, ServiceStats
from gpufleet.gateway.routes import Backend, ConfigError, GatewayError, ServiceRoute, validate

HEAD_LIMIT = 64 * 1024
POOL_PER_BACKEND = 64
CHUNK = 64 * 1024
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
}
T = TypeVar("T")


class _BadRequest(Exception):
    pass


@dataclass
class _Counters:
    requests: int = 0
    s4xx: int = 0
    s5xx: int = 0
    unauthorized: int = 0  # refused by the token check (among requests and s4xx)


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


@dataclass
class _Head:
    first: bytes
    headers: list[tuple[bytes, bytes]]

    def get(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def tokens(self, name: bytes) -> set[bytes]:
        out: set[bytes] = set()
        for k, v in self.headers:
            if k.lower() == name:
                out |= {t.strip().lower() for t in v.split(b",")}
        return out


_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _read_head(reader: asyncio.StreamReader) -> _Head | None:
    """The next message head, or None at a clean EOF before any byte."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise _BadRequest("connection closed inside a message head") from e
    except asyncio.LimitOverrunError as e:
        raise _BadRequest("message head too large") from e
    lines = raw[:-4].split(b"\r\n")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise _BadRequest(f"bad header line {line[:80]!r}")
        headers.append((name, value.strip()))
    return _Head(lines[0], headers)


async def _copy_body(
    head: _Head, src: asyncio.StreamReader, dst: asyncio.StreamWriter, until_close: bool
) -> None:
    """Copy one message body as framed by ``head`` (chunked, Content-Length, or to EOF)."""
    if b"chunked" in head.tokens(b"transfer-encoding"):
        while True:
            line = await src.readuntil(b"\r\n")
            dst.write(line)
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while (trailer := await src.readuntil(b"\r\n")) != b"\r\n":
                    dst.write(trailer)
                dst.write(b"\r\n")
                break
            await _copy_n(src, dst, size + 2)
        await dst.drain()
    elif (length := head.get(b"content-length")) is not None:
        await _copy_n(src, dst, int(length))
    elif until_close:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()


async def _copy_n(src: asyncio.StreamReader, dst: asyncio.StreamWriter, n: int) -> None:
    while n > 0:
        data = await src.read(min(n, CHUNK))
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        dst.write(data)
        n -= len(data)
        await dst.drain()


def _has_body(head: _Head) -> bool:
    return head.get(b"content-length") not in (None, b"0") or bool(
        head.tokens(b"transfer-encoding")
    )


def _simple(status: int, reason: str, extra: str = "") -> bytes:
    body = f"{reason.lower()}\n".encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\n{extra}"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


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
            name: ServiceStats(c.requests, c.s4xx, c.s5xx, c.unauthorized)
            for name, c in ((n, lst.counters) for n, lst in self.listeners.items())
        }

    def stop(self) -> None:
        if self.loop is None:
            return
        self._run(self._close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self.thread is not None:
            self.thread.join(timeout=5)
        self.loop = None

    async def _close_all(self) -> None:
        for lst in self.listeners.values():
            lst.server.close()
        for conns in self.pool.values():
            for _, w in conns:
                w.close()
        self.listeners.clear()
        self.pool.clear()

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
            try:
                await self._serve(name, reader, writer)
            except (OSError, asyncio.IncompleteReadError, _BadRequest, ValueError):
                pass
            finally:
                writer.close()

        return cb

    async def _serve(
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        while True:
            try:
                head = await asyncio.wait_for(_read_head(reader), IDLE_S)
            except TimeoutError:
                return
            if head is None:
                return
            lst = self.listeners.get(name)
            if lst is None:  # the service was removed: this connection still has its answer
                writer.write(_simple(503, "Service Unavailable"))
                await writer.drain()
                return
            lst.counters.requests += 1
            route = lst.route
            want = f"Bearer {route.token}".encode()
            if not hmac.compare_digest(head.get(b"authorization") or b"", want):
                lst.counters.s4xx += 1
                lst.counters.unauthorized += 1  # no await since requests += 1: read as one
                realm = f'www-authenticate: Bearer realm="{route.name}"\r\n'
                writer.write(_simple(401, "Unauthorized", realm))
                await writer.drain()
                return
            parts = head.first.split(b" ")
            if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
                raise _BadRequest("bad request line")
            client_keep = parts[2] == b"HTTP/1.1" and b"close" not in head.tokens(b"connection")
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
        head: _Head,
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
        request_head = b"\r\n".join(out_head) + b"\r\n\r\n"
        body = _has_body(head)
        conn: _Conn | None = None
        resp: _Head | None = None
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
                bw.write(request_head)
                if body:
                    await _copy_body(head, reader, bw, until_close=False)
                await bw.drain()
                resp = await _read_head(br)
                while resp is not None and resp.first[9:10] == b"1":
                    resp = await _read_head(br)  # interim 1xx: we answered 100-continue already
            except (OSError, asyncio.IncompleteReadError, _BadRequest):
                resp = None
            if resp is None:
                bw.close()
                if reused and not body:
                    lst.next -= 1  # a stale pooled connection: same backend, new connection
                    continue
                writer.write(_simple(502, "Bad Gateway"))
                await writer.drain()
                return 502, False
            break
        if resp is None or conn is None:
            writer.write(_simple(503 if not backends else 502, "Service Unavailable"))
            await writer.drain()
            return 503, False
        br, bw = conn
        status = int(resp.first.split(b" ")[1])
        no_body = method == b"HEAD" or status in (204, 304)
        delimited = no_body or _has_body(resp) or resp.get(b"content-length") is not None
        back_keep = delimited and b"close" not in resp.tokens(b"connection")
        lines = [resp.first] + [k + b": " + v for k, v in resp.headers if k.lower() not in HOP]
        lines.append(b"Connection: keep-alive" if delimited else b"Connection: close")
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
        if not no_body:
            await _copy_body(resp, br, writer, until_close=not delimited)
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
