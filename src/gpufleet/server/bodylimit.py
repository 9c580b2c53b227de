"""Refuse a request body over the limit before anything parses it (pure ASGI).

A Content-Length over the limit is answered 413 at once, without reading the body. A body
without one (chunked) is read here up to the limit, counting its bytes as they arrive: one
byte over is a 413, so at most ``limit`` bytes are ever held. A body within the limit is
handed on as it came."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"max body bytes: must be at least 1, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length: str | None = None
        chunked = False
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                length = v.decode("latin-1")
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        if length is not None and not chunked:
            if not (length.strip().isascii() and length.strip().isdigit()):
                await _refuse(send, 400, "Content-Length: not a whole number of bytes")
                return
            if int(length) > self.max_bytes:
                await self._too_large(send, f"Content-Length {int(length)}")
                return
            await self.app(scope, receive, send)  # the server reads no more than it says
            return
        if not chunked:
            await self.app(scope, receive, send)  # no body
            return
        held: list[Message] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # the client went away
                held.append(msg)
                break
            size += len(msg.get("body", b""))
            if size > self.max_bytes:
                await self._too_large(send, f"a chunked body of at least {size} bytes")
                return
            held.append(msg)
            if not msg.get("more_body", False):
                break

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send, what: str) -> None:
        await _refuse(
            send,
            413,
            f"request body: {what} is over the limit of {self.max_bytes} bytes "
            "(the controller's --max-body-bytes)",
            field="body",
        )


async def _refuse(send: Send, status: int, message: str, field: str = "") -> None:
    body: dict[str, Any] = {
        "detail": message,
        "errors": [{"field": field, "message": message}] if field else [],
    }
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"connection", b"close"),  # the unread body must not be taken for a request
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
