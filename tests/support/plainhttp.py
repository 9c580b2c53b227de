"""``httpx.get`` for a test's polls of a server it started: a plain-http URL is fetched with a
TLS context that trusts no one (never used: there is no TLS), because httpx's one-call
functions otherwise build a client that loads the system's trusted CAs on every call, 28.7 ms
of CPU against 1.9 (BENCHMARKS.md, issue 27's CPU). An https URL is fetched as ``httpx.get``
fetches it."""

from __future__ import annotations

from typing import Any

import httpx

from gpufleet.client.httpx_transport import trusts_no_one


def get(url: str, **kwargs: Any) -> httpx.Response:
    if url.lower().startswith("http://"):
        kwargs.setdefault("verify", trusts_no_one())
    return httpx.get(url, **kwargs)
