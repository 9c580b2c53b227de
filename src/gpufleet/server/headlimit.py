"""Refuse a request head (request line and headers) over a limit while it arrives (431).

uvicorn's httptools protocol keeps a request's URL and headers in memory until the blank line
that ends them, with no limit: one client that never ends a header held the controller's
memory as long as it kept sending (200 MiB of one header: +240 MiB of RSS, never given
back), before any token was read. Here the head's bytes are counted as they arrive; past
``MAX_HEAD_BYTES`` the client gets a 431 in the API's error shape and the connection is
closed. At most one read past the limit (asyncio's, 256 KiB) is ever held.

Nor has uvicorn a limit on the head's time: a client that trickled a head one byte every few
seconds (slowloris) held its connection, and a file descriptor, for as long as it liked. Here
the whole head must arrive within ``head_timeout_s`` of the connection (or, on a kept-alive
one, of the next request's first byte); past it the client gets a 408 and is closed.

A body trickled a byte every few seconds held a connection (and the request's task) as long,
with no limit at all: a body must arrive within the same ``head_timeout_s`` of its head's end,
and one second more for every ``BODY_BYTES_PER_S`` of it that has come (a large upload at any
sane speed is never cut off; the body limit bounds the total), else a 408 and the close. Time
the server itself keeps a body waiting (its reading paused while a request is served) is not
the client's.

An answer the client does not read held its connection, and the answer's unsent rest in memory,
forever (the transport pauses the application's writes; nothing resumes them): once writing is
paused, the client must read some of it within every ``head_timeout_s``, else the connection
is aborted and the rest dropped."""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# the head of any request the API takes is well under 1 KiB (a token is 47 characters); 64 KiB
# is above h11's 16 KiB and nginx's 4 × 8 KiB, so no proxy in front sends one this refuses
MAX_HEAD_BYTES = 64 * 1024
# a head is one write of well under 1 KiB: 30 s is ample for any client on any link
HEAD_TIMEOUT_S = 30.0
# a body's allowance beyond the head timeout: 1 s for every 64 KiB come (a 1 MiB body: 16 s more)
BODY_BYTES_PER_S = 64 * 1024


class HeadTooLarge(Exception):
    """Raised in the parser's callback: the head is over the limit."""


class HeadLimitProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the request head bounded (``uvicorn.run(http=...)``)."""

    _in_head = True  # reading a request's line and headers (before its body, between requests)
    _head_bytes = 0
    _too_large = False
    head_timeout_s = HEAD_TIMEOUT_S
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _body_start = 0.0  # when the head ended (loop time)
    _body_bytes = 0  # of the body, come so far
    _write_timer: asyncio.TimerHandle | None = None
    _unsent = 0  # the transport's unsent bytes when the write timer was last armed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a client that connects and sends nothing is timed too

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_head_timer()  # a kept-alive connection's next head: its first byte

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self._disarm_body_timer()
        self._disarm_write_timer()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._unsent = self.transport.get_write_buffer_size()
            self._write_timer = self.loop.call_later(self.head_timeout_s, self._write_timed_out)

    def resume_writing(self) -> None:
        self._disarm_write_timer()
        super().resume_writing()

    def _disarm_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timed_out(self) -> None:
        self._write_timer = None  # (a closing transport too: its close waits for the rest)
        unsent = self.transport.get_write_buffer_size()
        if unsent == 0:  # all gone since: nothing held
            return
        if unsent < self._unsent:  # the client reads, if slowly: more time
            self._unsent = unsent
            self._write_timer = self.loop.call_later(self.head_timeout_s, self._write_timed_out)
        else:
            self.transport.abort()  # the client read nothing in the time: the rest is dropped

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            message = f"request head: not all sent within {self.head_timeout_s:g} s"
            self._refuse(b"408 Request Timeout", message)

    def _disarm_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_allowed_s(self) -> float:
        return self.head_timeout_s + self._body_bytes / BODY_BYTES_PER_S

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self._in_head:
            return
        waited = self.loop.time() - self._body_start
        allowed = self._body_allowed_s()
        if self.flow.read_paused:  # the server keeps the body waiting, not the client
            self._body_timer = self.loop.call_later(self.head_timeout_s, self._body_timed_out)
        elif waited < allowed:  # more came meanwhile: more time
            self._body_timer = self.loop.call_later(allowed - waited, self._body_timed_out)
        elif self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # answered already: the rest of its body is not waited for
        else:
            message = (
                f"request body: not all sent within {round(allowed, 1):g} s "
                f"({self._body_bytes} bytes came; the controller waits --head-timeout-s, "
                f"{self.head_timeout_s:g} s, and 1 s more for every {BODY_BYTES_PER_S} bytes)"
            )
            self._refuse(b"408 Request Timeout", message, "body")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)  # a read may hold the body's first bytes: see below
        super().data_received(data)
        if not self._in_head and self._body_timer is None and not self.transport.is_closing():
            # a body still to come after this read (one that came whole is never timed)
            self._body_timer = self.loop.call_later(self.head_timeout_s, self._body_timed_out)
        # still in the head after the read: every byte counted is the head's
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._refuse_head()

    def on_headers_complete(self) -> None:
        # a head that came whole in one read: its exact size, before the application sees it
        size = len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers)
        self._disarm_head_timer()
        self._in_head = False
        self._head_bytes = 0
        self._body_start = self.loop.time()
        self._body_bytes = 0
        if size > MAX_HEAD_BYTES:
            self._too_large = True
            raise HeadTooLarge  # the parser stops; uvicorn answers its 400, made a 431 below
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm_body_timer()
        self._in_head = True  # the next request's head (keep-alive, pipelining) is counted anew

    def send_400_response(self, msg: str) -> None:
        if self._too_large:
            self._refuse_head()
        elif self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # a body that went bad after the answer began
        else:  # not HTTP (a NUL in a header, a chunk size that is no number): the one shape
            message = "request: not valid HTTP/1.1 (its request line, a header or its framing)"
            self._refuse(b"400 Bad Request", message, "headers")

    def _refuse_head(self) -> None:
        message = (
            f"request head: over {MAX_HEAD_BYTES} bytes of request line and headers "
            "(a header too large, or too many)"
        )
        self._refuse(b"431 Request Header Fields Too Large", message)

    def _refuse(self, status: bytes, message: str, field: str = "headers") -> None:
        """Answer ``status`` in the API's error shape and close the connection."""
        body = json.dumps({"detail": message, "errors": [{"field": field, "message": message}]})
        data = body.encode()
        self.transport.write(
            b"HTTP/1.1 " + status + b"\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(data)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + data
        )
        self.transport.close()  # the parser's buffer goes with the connection


def head_limited(head_timeout_s: float) -> type[HeadLimitProtocol]:
    """The protocol class for ``uvicorn.run(http=...)`` (which takes a class, not an
    instance), with the controller's head timeout."""
    return type("HeadLimitProtocol", (HeadLimitProtocol,), {"head_timeout_s": head_timeout_s})
