"""``POST /api/v1/jobs`` without FastAPI's routing: the one request a load sends hundreds of
times a second (issue 26: 200 jobs/s through a failover). FastAPI's route matching, its
dependency solving and its middleware layers cost a submission about as much CPU as storing and
scheduling it (py-spy on the leader under load, BENCHMARKS.md); on a shared 2-core machine the
leader's CPU is what bounds its rate.

An ASGI layer inside the body limit and the standby gate (so both still apply) that takes only
the plain case: a known token of a user or admin, a JSON body that ``JobSubmit`` accepts, no
query, the service up. The work is the router's own (``submitting.submit_jobs``) and its
refusals are answered by the application's own exception handlers, so the answers are the
router's. Anything else (no or unknown token, another role, a body FastAPI would refuse or
read otherwise, a query) goes on, unread, to FastAPI, which answers it as it always has."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api import schemas as s
from gpufleet.server.auth import Principal
from gpufleet.server.submitting import submit_jobs

_ROLES = ("user", "admin")  # routers/jobs.py's USERS
Handler = Callable[[Request, Exception], Awaitable[Response]]


class SubmitFastPath:
    def __init__(self, app: ASGIApp, *, api: Any, path: str) -> None:
        self.app = app
        self.api = api  # the FastAPI application: its state and its exception handlers
        self.path = path
        api.state.fast_submits = 0  # the submissions answered here (tests say it was used)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] != self.path
            or scope.get("query_string")
        ):
            await self.app(scope, receive, send)
            return
        who = self._who(scope)
        svc = self.api.state.service
        if who is None or svc.down:
            await self.app(scope, receive, send)
            return
        held, body = await _body(receive)

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        sub = _submission(body) if body is not None else None
        if sub is None:  # FastAPI says what is wrong with it, in its words
            await self.app(scope, replay, send)
            return
        self.api.state.fast_submits += 1
        try:
            ids = await submit_jobs(sub, who, svc, self.api.state)
        except Exception as e:
            handler = self._handler(e)
            if handler is None:
                raise  # as from the router: the server's error middleware answers 500
            response = await handler(Request(scope, replay), e)
        else:
            response = JSONResponse({"ids": ids}, status_code=201)
        await response(scope, replay, send)

    def _who(self, scope: Scope) -> Principal | None:
        """The principal of a valid token the cache knows, if it may submit; else None
        (auth.py's ``principal`` says what is wrong, and counts the failure)."""
        auth = ctype = None
        for k, v in scope["headers"]:
            if k == b"authorization" and auth is None:
                auth = v
            elif k == b"content-type" and ctype is None:
                ctype = v
        if auth is None or ctype is None or ctype.lower() != b"application/json":
            return None
        scheme, _, secret = auth.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            return None
        p: Principal | None = self.api.state.tokens.known(secret.strip())
        return p if p is not None and p.role in _ROLES else None

    def _handler(self, e: Exception) -> Handler | None:
        """The application's handler of ``e`` as Starlette's exception middleware finds it
        (by status, then by class); None for a crash (``Exception``'s is the server's)."""
        handlers: dict[Any, Handler] = self.api.exception_handlers
        if isinstance(e, HTTPException) and e.status_code in handlers:
            return handlers[e.status_code]
        for cls in type(e).__mro__:
            if cls is Exception:
                return None
            if cls in handlers:
                return handlers[cls]
        return None


async def _body(receive: Receive) -> tuple[list[Message], bytes | None]:
    """The request's messages as they came (to replay) and its body; None when the client
    went away before it was whole."""
    held: list[Message] = []
    chunks: list[bytes] = []
    while True:
        msg = await receive()
        held.append(msg)
        if msg["type"] != "http.request":
            return held, None
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return held, b"".join(chunks)


def _submission(body: bytes) -> s.JobSubmit | None:
    """The body as FastAPI reads it (``json.loads``, then the model in Python mode), or None
    where FastAPI would refuse it."""
    try:
        return s.JobSubmit.model_validate(json.loads(body))
    except (ValueError, ValidationError, RecursionError):  # JSONDecodeError, UnicodeDecodeError too
        return None
