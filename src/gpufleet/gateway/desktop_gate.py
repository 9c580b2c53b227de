"""The built-in proxy's part for desktops (``ServiceRoute.viewers``): the login page, the
check of a viewer's own token (bearer or cookie), and the WebSocket tunnel noVNC speaks over.
What HAProxy does with its own rules (``haproxy.py``), done here in Python."""

from __future__ import annotations

import asyncio
import hmac

from gpufleet.gateway import viewers as v
from gpufleet.gateway.http1 import CHUNK, Head, read_head, simple
from gpufleet.gateway.routes import KEY_HEADER, Backend, ServiceRoute

CONNECT_S = 2.0


def key_line(b: Backend) -> list[bytes]:
    """The header line that shows a desktop's session the request came through this proxy
    (none for a backend with no key)."""
    return [f"{KEY_HEADER}: {b.key}".encode()] if b.key else []


def _answer(status: int, reason: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/html; charset=utf-8\r\n{extra}"
        f"cache-control: no-store\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


def starting(route: ServiceRoute) -> bytes:
    return _answer(503, "Service Unavailable", v.starting_page(route.name), "retry-after: 1\r\n")


def _allowed(route: ServiceRoute, token: bytes | None) -> bool:
    if not token:
        return False
    d = v.digest(token)
    return any(hmac.compare_digest(d, x) for x in route.viewers)


async def gate(
    route: ServiceRoute, head: Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[Head | None, bool]:
    """(the head to forward, its credential taken out; None: answered here and to be closed),
    and whether the token check refused it."""
    parts = head.first.split(b" ")
    method, target = (parts[0], parts[1]) if len(parts) == 3 else (b"", b"")
    path = target.split(b"?")[0]
    if path == v.LOGIN.encode():
        return None, await _login(route, method, head, reader, writer)
    token = v.bearer(head.get(b"authorization")) or v.cookie_token(head.get(b"cookie"))
    if not _allowed(route, token):
        if token is None and method == b"GET" and b"upgrade" not in head.tokens(b"connection"):
            writer.write(_answer(303, "See Other", b"", f"location: {v.LOGIN}\r\n"))
            await writer.drain()
            return None, False  # to the login page: no refusal
        realm = f'www-authenticate: Bearer realm="{route.name}"\r\n'
        writer.write(simple(401 if token is None else 403, "Forbidden", realm))
        await writer.drain()
        return None, True
    headers = []
    for k, val in head.headers:
        name = k.lower()
        if name == b"authorization":
            continue
        if name == b"cookie":
            rest = v.without_cookie(val)
            if rest is not None:
                headers.append((k, rest))
            continue
        headers.append((k, val))
    return Head(head.first, headers), False


async def _login(
    route: ServiceRoute,
    method: bytes,
    head: Head,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> bool:
    """The login page (GET) or its form (POST): a viewer's token comes back as the cookie."""
    if method != b"POST":
        writer.write(_answer(200, "OK", v.login_page(route.name)))
        await writer.drain()
        return False
    length = int(head.get(b"content-length") or b"0")
    if not 0 < length <= v.FORM_MAX:
        writer.write(_answer(400, "Bad Request", v.login_page(route.name, "no token given")))
        await writer.drain()
        return True
    token = v.form_token(await reader.readexactly(length))
    if not _allowed(route, token.encode()):
        said = f"this token may not open desktop {route.name}: only its owner's and admins' can"
        writer.write(_answer(403, "Forbidden", v.login_page(route.name, said)))
        await writer.drain()
        return True
    extra = f"set-cookie: {v.set_cookie(token)}\r\nlocation: {v.AFTER_LOGIN}\r\n"
    writer.write(_answer(303, "See Other", b"", extra))
    await writer.drain()
    return False


async def tunnel(
    order: tuple[Backend, ...],
    start: int,
    head: Head,
    hop: set[bytes],
    forwarded_for: bytes,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> int:
    """An Upgrade (WebSocket) request to a backend; on its 101, bytes both ways until one
    side closes. The backend's status."""
    lines = [head.first] + [k + b": " + val for k, val in head.headers if k.lower() not in hop]
    upgrade = head.get(b"upgrade") or b"websocket"
    lines += [b"X-Forwarded-For: " + forwarded_for, b"Connection: Upgrade", b"Upgrade: " + upgrade]
    conn = None
    for i in range(len(order)):
        b = order[(start + i) % len(order)]
        try:
            conn = await asyncio.wait_for(asyncio.open_connection(b.host, b.port), CONNECT_S)
            break
        except (OSError, TimeoutError):
            continue
    if conn is None:
        writer.write(simple(503, "Service Unavailable"))
        await writer.drain()
        return 503
    br, bw = conn
    try:
        bw.write(b"\r\n".join(lines + key_line(b)) + b"\r\n\r\n")
        await bw.drain()
        resp = await read_head(br)
        if resp is None:
            writer.write(simple(502, "Bad Gateway"))
            await writer.drain()
            return 502
        status = int(resp.first.split(b" ")[1])
        out = [resp.first] + [k + b": " + val for k, val in resp.headers]
        writer.write(b"\r\n".join(out) + b"\r\n\r\n")
        await writer.drain()
        await _splice(reader, bw, br, writer)
        return status
    finally:
        bw.close()


async def _splice(
    cr: asyncio.StreamReader,
    bw: asyncio.StreamWriter,
    br: asyncio.StreamReader,
    cw: asyncio.StreamWriter,
) -> None:
    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(CHUNK):
                dst.write(data)
                await dst.drain()
        except OSError:
            pass

    tasks = [asyncio.ensure_future(pipe(cr, bw)), asyncio.ensure_future(pipe(br, cw))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
