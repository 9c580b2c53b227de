"""What a controller that does not lead answers: 503 with where the leader is, at once, to
every request but ``/healthz`` (which says the role). An ASGI middleware, outermost but the
body limit: nothing of the request is read or done. Clients (``client/failover.py``) follow
``X-Gpufleet-Leader`` or try their other addresses after ``Retry-After``; a browser asking for
a page (the dashboard) is sent to the leader with 307."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from gpufleet.server.ha.hearing import UNREACHED_HEADER, addresses
from gpufleet.server.ha.stale import (
    KNOWN_LEADER_HEADER,
    LAST_CONTACT_HEADER,
    stale_target,
)

OPEN_PATHS = ("/healthz", "/metrics")  # /metrics: a standby's says only its role
LEADER_HEADER = "x-gpufleet-leader"
ROLE_HEADER = "x-gpufleet-role"


class StandbyGate:
    def __init__(
        self,
        app: Any,
        *,
        ready: Callable[[], bool],
        leader: Callable[[], str],
        contact: Callable[[], tuple[float | None, bool]] = lambda: (None, False),
        told: Callable[[str, frozenset[str]], None] | None = None,
    ) -> None:
        self.app = app
        self.ready = ready  # this controller leads and has its state: it answers
        self.leader = leader  # where the leader is ("" unknown)
        self.contact = contact  # (seconds since the leader was seen, one known): stale reads
        self.told = told  # an agent cannot reach these addresses (ADR 0048)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        stale = stale_target(scope)  # a read the client accepts stale (stale.py)
        if self.ready():
            await self.app(scope, receive, self._stamped(send, "leader") if stale else send)
            return
        await self._note(scope)
        if stale is not None:  # answered from the store, saying how old it may be
            scope = {**scope, "path": stale, "raw_path": stale.encode()}
            await self.app(scope, receive, self._stamped(send, "standby"))
            return
        where = self.leader()
        if where and scope["method"] in ("GET", "HEAD") and _page(scope["path"]):
            await _redirect(send, where, scope)  # a browser (the dashboard) follows it
            return
        detail = (
            f"this controller is a standby: the leader is {where}"
            if where
            else "this controller is a standby and no leader is known yet: retry shortly"
        )
        body = json.dumps({"detail": detail, "leader": where}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1"),
            (ROLE_HEADER.encode(), b"standby"),
        ]
        if where:
            headers.append((LEADER_HEADER.encode(), where.encode()))
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _note(self, scope: Any) -> None:
        """An agent that names the addresses it cannot reach: noted for its node, which its
        own token says (any other caller's header is ignored)."""
        headers = dict(scope.get("headers") or ())
        raw, auth = headers.get(UNREACHED_HEADER.encode()), headers.get(b"authorization", b"")
        if self.told is None or not raw or auth[:7].lower() != b"bearer ":
            return
        try:
            tokens = scope["app"].state.tokens
            who = await asyncio.to_thread(tokens.verify, auth[7:].decode().strip())
        except Exception:  # no token cache, the store away, a header not ASCII: not noted
            return
        if who is not None and who.role == "agent" and who.node:
            self.told(who.node, addresses(raw.decode(errors="replace")))

    def _stamped(self, send: Any, role: str) -> Any:
        """``send`` with the headers that say how stale the answer may be."""
        age, known = self.contact()
        extra = [(ROLE_HEADER.encode(), role.encode()),
                 (KNOWN_LEADER_HEADER.encode(), b"true" if known else b"false")]  # fmt: skip
        if age is not None:
            extra.append((LAST_CONTACT_HEADER.encode(), str(round(age * 1000)).encode()))
        where = self.leader() if role == "standby" else ""
        if where:
            extra.append((LEADER_HEADER.encode(), where.encode()))

        async def stamped(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return stamped


def _page(path: str) -> bool:
    """A page or a file of the dashboard, not the API or the metrics."""
    return not path.startswith(("/api/", "/metrics"))


async def _redirect(send: Any, where: str, scope: Any) -> None:
    query = scope.get("query_string", b"")
    target = f"{where.rstrip('/')}{scope['path']}".encode() + (b"?" + query if query else b"")
    headers = [(b"location", target), (b"content-length", b"0"), (b"retry-after", b"1"),
               (ROLE_HEADER.encode(), b"standby")]  # fmt: skip
    await send({"type": "http.response.start", "status": 307, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
