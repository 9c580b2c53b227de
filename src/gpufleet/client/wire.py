"""HTTP/1.1 over a plain socket: the transport (``transport.Transport``) of the commands that
must start fast (issue 12; why not httpx: docs/adr/, "CLI transport"). ``http.client`` imports
the ``email`` package to parse headers, about 25 ms of a shim's start. This speaks only what the
controller needs: one request at a time on a kept-alive connection, an answer with a
Content-Length, chunked or ended by the close, ``1xx`` interim answers skipped, the head and
the body bounded (checked before anything is allocated for them). Plain http goes through the
interpreter's ``_socket`` itself: ``socket`` wraps it in ``enum``s and ``selectors``, about 2 ms
of a shim's start that a connection does not need (issue 27); ``socket`` and ``ssl`` are imported
only for an https server."""

from __future__ import annotations

import _socket

from gpufleet.client.transport import Response

TYPE_CHECKING = False  # no typing at run time (issue 27)
if TYPE_CHECKING:
    from typing import Any

MAX_HEAD = 64 * 1024  # the status line and headers (trailers too) together
MAX_BODY = 64 * 1024 * 1024  # a page of GET /jobs (at most 1000 jobs) is far below this
_READ = 64 * 1024
# a body this large asks the server's go-ahead first (Expect: 100-continue, RFC 9110 10.1.1): a
# controller that refuses it by its Content-Length (413) answers before any of it is sent, so
# the answer is never lost in the reset of a body it would not read; a server that ignores the
# expectation gets the body after EXPECT_WAIT s
EXPECT_OVER = 1024 * 1024
EXPECT_WAIT = 10.0


class BadResponse(OSError):
    """The server's answer is not HTTP this client takes (too large, cut short, malformed):
    an OSError, as an unreachable server is, since no answer can be read from it."""


def connect(host: str | bytes, port: int, timeout: float) -> _socket.socket:
    """``socket.create_connection`` on ``_socket``: each address ``host`` has, in the order
    getaddrinfo gives them, until one connects; the last one's error otherwise."""
    error: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as e:
            error = e
            sock.close()
    raise error or OSError(f"getaddrinfo returned no address for {host!r}")


class Connection:
    """One kept-alive connection to ``host:port``: a ``transport.Transport``."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        https: bool = False,
        ca: str | None = None,
        timeout: float = 30.0,
        max_head: int = MAX_HEAD,
        max_body: int = MAX_BODY,
    ) -> None:
        self.host, self.port, self.https, self.ca = host, port, https, ca
        self.timeout = timeout
        self.max_head, self.max_body = max_head, max_body
        default = 443 if https else 80
        self.host_header = host if port == default else f"{host}:{port}"
        if ":" in host and not host.startswith("["):  # an IPv6 address
            self.host_header = f"[{host}]" if port == default else f"[{host}]:{port}"
        self._sock: Any = None
        self._buf = bytearray()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf.clear()

    def _open(self) -> None:
        # an ASCII name as bytes: a str one is encoded by the idna codec, whose import
        # (unicodedata, stringprep) is a few ms of a command (issue 27)
        host: str | bytes = self.host.encode() if self.host.isascii() else self.host
        if self.https:
            import socket
            import ssl  # only for https: its import and CA bundle cost a plain-http command

            address = (host, self.port)  # getaddrinfo takes bytes, typeshed names str only
            sock = socket.create_connection(address, timeout=self.timeout)  # type: ignore[arg-type]
            ctx = ssl.create_default_context(cafile=self.ca)
            self._sock = ctx.wrap_socket(sock, server_hostname=self.host)
        else:  # one request in one segment, answered at once: no Nagle delay
            self._sock = connect(host, self.port, self.timeout)
            self._sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)

    def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None = None,
        *,
        timeout: float | None = None,
    ) -> Response:
        if self._sock is None:
            self._open()
        self._sock.settimeout(self.timeout if timeout is None else timeout)
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        big = body is not None and len(body) >= EXPECT_OVER
        if big:
            lines.append("Expect: 100-continue")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            if big:
                answer = self._go_ahead(head, method)
                if answer is not None:  # refused before the body: the connection is done
                    self.close()
                    return answer
                head = b""
            try:
                self._sock.sendall(head + body if body else head)
            except (BrokenPipeError, ConnectionResetError) as sending:
                # a server may answer before it has read the body, and close: a body over its
                # limit gets a 413 and a reset of what was still being sent. The answer is
                # read from what came before the reset (Linux keeps it), so the caller is told
                # why, not that the controller cannot be reached.
                try:
                    return self._response(method)
                except OSError:  # BadResponse too: no answer either
                    raise sending from None
            return self._response(method)
        except BrokenPipeError as e:  # a shim takes a BrokenPipeError for its stdout closed
            self.close()
            raise ConnectionResetError(e.errno, f"{self._who()}: the connection closed") from None
        except BaseException:
            self.close()  # the connection is in an unknown state: never reused
            raise

    def _go_ahead(self, head: bytes, method: str) -> Response | None:
        """``head`` (with Expect: 100-continue) alone, then the server's word: None to send the
        body (100 Continue, or nothing within EXPECT_WAIT s), or its final answer."""
        self._sock.sendall(head)
        timeout = self._sock.gettimeout()
        self._sock.settimeout(min(EXPECT_WAIT, timeout or EXPECT_WAIT))
        try:
            while b"\r\n\r\n" not in self._buf:
                if len(self._buf) > self.max_head:
                    raise BadResponse(f"{self._who()}: the response head is over {self.max_head}")
                try:
                    if not self._fill():
                        raise BadResponse(f"{self._who()}: the connection closed unanswered")
                except TimeoutError:
                    if not self._buf:
                        return None  # a server that does not answer the expectation
                    self._sock.settimeout(timeout)
        finally:
            self._sock.settimeout(timeout)
        status = bytes(self._buf[: self._buf.find(b"\r\n")]).split(b" ", 2)
        if len(status) > 1 and status[1] == b"100":
            del self._buf[: self._buf.find(b"\r\n\r\n") + 4]
            return None
        return self._response(method)

    # ----- reading -------------------------------------------------------------------------

    def _fill(self) -> bool:
        data = self._sock.recv(_READ)
        self._buf += data
        return bool(data)

    def _line(self, budget: int, what: str) -> bytes:
        """One CRLF-ended line (without it), at most ``budget`` bytes with its end."""
        start = 0
        while True:
            end = self._buf.find(b"\n", start)
            if end >= 0:
                if end + 1 > budget:
                    break
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                return line.removesuffix(b"\r")
            if len(self._buf) >= budget:
                break
            start = len(self._buf)
            if not self._fill():
                raise BadResponse(f"{self._who()}: the connection closed in the {what}")
        raise BadResponse(f"{self._who()}: the {what} is over {self.max_head} bytes")

    def _exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not self._fill():
                raise BadResponse(
                    f"{self._who()}: the body was cut short ({len(self._buf)} of {n} bytes)"
                )
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _head(self, budget: list[int]) -> dict[str, str]:
        """Header lines up to the empty one; ``budget``: the bytes the head may still take."""
        headers: dict[str, str] = {}
        while True:
            before = len(self._buf)
            line = self._line(budget[0], "response head")
            budget[0] -= before - len(self._buf)
            if not line:
                return headers
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise BadResponse(f"{self._who()}: a malformed header line {line[:80]!r}")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value

    def _response(self, method: str) -> Response:
        budget = [self.max_head]
        while True:
            before = len(self._buf)
            status_line = self._line(budget[0], "response head")
            budget[0] -= before - len(self._buf)
            parts = status_line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise BadResponse(f"{self._who()}: not an HTTP/1.x answer: {status_line[:80]!r}")
            status = int(parts[1])
            headers = self._head(budget)
            if (
                100 <= status < 200 and status != 101
            ):  # 100 Continue and the like: the answer follows
                continue
            break
        keep = parts[0] == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked(budget)
        elif "content-length" in headers:
            length = headers["content-length"].strip()
            if not length.isdigit():
                raise BadResponse(f"{self._who()}: Content-Length {length[:40]!r} is not a number")
            if int(length) > self.max_body:
                raise BadResponse(
                    f"{self._who()}: a body of {int(length)} bytes, over {self.max_body}"
                )
            body = self._exact(int(length))
        else:  # ended by the close
            while self._fill():
                if len(self._buf) > self.max_body:
                    raise BadResponse(f"{self._who()}: a body over {self.max_body} bytes")
            body, keep = bytes(self._buf), False
            self._buf.clear()
        if not keep:
            self.close()
        return Response(status, headers, body)

    def _chunked(self, budget: list[int]) -> bytes:
        out = bytearray()
        while True:
            size_line = self._line(1024, "chunk size line")
            size = size_line.split(b";", 1)[0].strip()
            if not size or size.strip(b"0123456789abcdefABCDEF"):
                raise BadResponse(f"{self._who()}: a bad chunk size {size[:40]!r}")
            n = int(size, 16)
            if n == 0:
                self._head(budget)  # the trailers, bounded like the head
                return bytes(out)
            if len(out) + n > self.max_body:
                raise BadResponse(f"{self._who()}: a chunked body over {self.max_body} bytes")
            out += self._exact(n)
            if self._exact(2) != b"\r\n":
                raise BadResponse(f"{self._who()}: a chunk not ended by CRLF")

    def _who(self) -> str:
        return f"the answer of {'https' if self.https else 'http'}://{self.host_header}"
