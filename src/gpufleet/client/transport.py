"""The seam between the client's calls (``calls.py``) and the HTTP under them, in httpx's
shape: the calls build a request and read its answer; a transport, handed to the client,
carries it. Two transports: ``wire.Connection`` (HTTP/1.1 over a plain socket, for the
commands that must start fast: docs/adr/0001-cli-transport.md) and ``httpx_transport``'s
(httpx, for the SDK and the agent; tests hand it an ``httpx.MockTransport`` or an ASGI
transport). Light: no httpx or pydantic here."""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time: the shims import Response (issue 27)


class Response:
    """An answer: its status, its headers (names in lower case; repeated ones joined by
    ``", "``) and its body, read whole."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


if TYPE_CHECKING:  # a type only: what the calls are handed
    from typing import Protocol

    class Transport(Protocol):
        def request(
            self,
            method: str,
            target: str,
            headers: dict[str, str],
            body: bytes | None = None,
            *,
            timeout: float | None = None,
        ) -> Response:
            """Send ``method target`` (a path and its query) and read the answer; ``timeout``
            replaces the transport's own for this request (a long poll). Raises ``OSError`` (or
            httpx's ``HTTPError`` from httpx's transport) when no answer can be read."""
            ...

        def close(self) -> None: ...
