"""Refuse a request head (request line and headers) over a limit while it arrives (431).

uvicorn's httptools protocol keeps a request's URL and headers in memory until the blank line
that ends them, with no limit: one client that never ends a header held the controller's
memory as long as it kept sending (200 MiB of one header: +240 MiB of RSS, never given
back), before any token was read. Here the head's bytes are counted as they arrive; past
``MAX_HEAD_BYTES`` the client gets a 431 in the API's error shape and the connection is
closed. At most one read past the limit (asyncio's, 256 KiB) is ever held."""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# the head of any request the API takes is well under 1 KiB (a token is 47 characters); 64 KiB
# is above h11's 16 KiB and nginx's 4 × 8 KiB, so no proxy in front sends one this refuses
MAX_HEAD_BYTES = 64 * 1024


class HeadTooLarge(Exception):
    """Raised in the parser's callback: the head is over the limit."""


class HeadLimitProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the request head bounded (``uvicorn.run(http=...)``)."""

    _in_head = True  # reading a request's line and headers (before its body, between requests)
    _head_bytes = 0
    _too_large = False

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)  # a read may hold the body's first bytes: see below
        super().data_received(data)
        # still in the head after the read: every byte counted is the head's
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._refuse_head()

    def on_headers_complete(self) -> None:
        # a head that came whole in one read: its exact size, before the application sees it
        size = len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers)
        self._in_head = False
        self._head_bytes = 0
        if size > MAX_HEAD_BYTES:
            self._too_large = True
            raise HeadTooLarge  # the parser stops; uvicorn answers its 400, made a 431 below
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True  # the next request's head (keep-alive, pipelining) is counted anew

    def send_400_response(self, msg: str) -> None:
        if self._too_large:
            self._refuse_head()
        else:
            super().send_400_response(msg)

    def _refuse_head(self) -> None:
        message = (
            f"request head: over {MAX_HEAD_BYTES} bytes of request line and headers "
            "(a header too large, or too many)"
        )
        body = json.dumps({"detail": message, "errors": [{"field": "headers", "message": message}]})
        data = body.encode()
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(data)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + data
        )
        self.transport.close()  # the parser's buffer goes with the connection
