"""httpx as a ``transport.Transport``: kept-alive pooled connections, HTTP/1.1 and TLS as
httpx does them, for the SDK and the agent. An ``httpx.BaseTransport`` may be handed in
(tests: ``httpx.MockTransport``, an ASGI app's transport) instead of the network's."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

from gpufleet.client.transport import Response


def tls_verify(
    ca: str | Path | None = None, env: Mapping[str, str] = os.environ
) -> ssl.SSLContext | bool:
    """How an https controller is verified: against the CA file ``ca`` (else ``$GPUFLEET_CA``),
    which a cluster with its own CA hands out, or else against the system's trusted CAs.

    A missing or unreadable CA file raises ``ValueError`` naming it: falling back to the system
    CAs would turn a typo into a refusal that is hard to explain."""
    path = ca or env.get("GPUFLEET_CA") or None
    if path is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(Path(path).expanduser()))
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"CA file {path}: cannot load it ({e})") from None


def trusts_no_one() -> ssl.SSLContext:
    """Verifies certificates and host names, against no CA at all: every https peer fails."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def verify_for(
    base_url: str, ca: str | Path | None, no_ca: Callable[[], ssl.SSLContext] = trusts_no_one
) -> ssl.SSLContext | bool:
    verify = tls_verify(ca)
    if verify is True and not base_url.lower().startswith("https://"):
        # a plain-http server: loading the trusted CAs (httpx builds the context up front)
        # costs a command tens of ms for nothing; an https URL met on the way (a Link) is
        # refused by this context that trusts no one, never sent unverified
        return no_ca()
    return verify


class HttpxTransport:
    def __init__(
        self,
        base_url: str,
        *,
        ca: str | Path | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        headers: dict[str, str] | None = None,
        verify: ssl.SSLContext | bool | None = None,
    ) -> None:
        """``verify``: how https peers are verified (None: ``verify_for(base_url, ca)``)."""
        if verify is None:
            verify = verify_for(base_url, ca)
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=headers,  # every request's (a test's raw httpx call reads the token here)
            transport=transport,
            timeout=timeout,
            verify=verify,
        )

    def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None = None,
        *,
        timeout: float | None = None,
    ) -> Response:
        r = self.http.request(
            method,
            target,
            headers=headers,
            content=body,
            timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
        )
        return Response(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content)

    def close(self) -> None:
        self.http.close()
