"""Refuse a JSON body that gives a key twice in one object (422), before anything reads it
(pure ASGI, inside the body limit).

``json.loads`` keeps the last of two equal keys and says nothing: ``{"user": "alice", ...,
"user": "bob"}`` is read as bob, while a proxy, a log or an audit that reads the first one sees
alice. One document, one meaning: every key given more than once is named in one 422, and
nothing is done. A body is read when FastAPI reads it as JSON (``application/json`` or
``application/*+json``; without a Content-Type it is not JSON to FastAPI either); one that is
not JSON at all goes on to FastAPI, which says so."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.bounds import safe

MAX_NAMED = 20  # duplicate keys named in one answer


class _Pairs:
    """``object_pairs_hook``: each object as a dict, every key seen twice noted."""

    def __init__(self) -> None:
        self.twice: dict[str, None] = {}

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(pairs)
        if len(d) != len(pairs):
            seen: set[str] = set()
            for k, _ in pairs:
                if k in seen:
                    self.twice[k] = None
                seen.add(k)
        return d


def duplicate_keys(body: bytes) -> list[str]:
    """The keys given more than once in one object of ``body`` (in the order found); none
    when there are none, or when ``body`` is not JSON (FastAPI refuses it in its words)."""
    hook = _Pairs()
    try:
        json.loads(body, object_pairs_hook=hook)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError too
        return []
    return list(hook.twice)


def _is_json(content_type: bytes | None) -> bool:
    """Whether FastAPI reads a body of this Content-Type as JSON (fastapi/routing.py)."""
    if content_type is None:
        return False  # FastAPI's strict_content_type
    kind = content_type.split(b";", 1)[0].strip().lower()
    main, _, sub = kind.partition(b"/")
    return main == b"application" and (sub == b"json" or sub.endswith(b"+json"))


class StrictJson:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        has_body = False
        content_type: bytes | None = None
        for k, v in scope.get("headers", ()):
            if k == b"content-type" and content_type is None:
                content_type = v
            elif (k == b"content-length" and v.strip() not in (b"", b"0")) or (
                k == b"transfer-encoding"
            ):
                has_body = True
        if not has_body or not _is_json(content_type):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        chunks: list[bytes] = []
        while True:  # the body limit outside this one bounds what is held
            msg = await receive()
            held.append(msg)
            if msg["type"] != "http.request":
                break  # the client went away: the application hears it
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body", False):
                twice = duplicate_keys(b"".join(chunks))
                if twice:
                    await _refuse(send, twice)
                    return
                break

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Send, twice: list[str]) -> None:
    names = ", ".join(json.dumps(safe(k[:100]), ensure_ascii=False) for k in twice[:MAX_NAMED])
    if len(twice) > MAX_NAMED:
        names += f" and {len(twice) - MAX_NAMED} more"
    message = f"cannot be read: a key given twice in one object ({names}); give each once"
    body = {"detail": f"body: {message}", "errors": [{"field": "body", "message": message}]}
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
