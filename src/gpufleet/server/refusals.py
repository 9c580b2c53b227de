"""Refusals as types: what a request was refused for, each kind one class, and the one table
that gives each kind its HTTP status (``STATUS``; the app's handler answers with it).

The service raises these; the core raises ``core.errors`` (a contradiction, or an unknown
object), which ``of_core`` turns into the refusal its caller hears. Nothing maps an error to a
status by reading its text."""

from __future__ import annotations

from gpufleet.core.errors import ControllerError, UnknownObject

RETRY_AFTER_S = 2  # what a 503 tells a client to wait (seconds): its Retry-After


class RequestError(Exception):
    """Refused: the message says why (and what to fix, where the caller can)."""

    @property
    def status(self) -> int:
        """The HTTP status of this kind of refusal (``STATUS``)."""
        return status_of(self)


class Forbidden(RequestError):
    """The token may not do this (another user's job or service, another node's task)."""


class NotFound(RequestError):
    """It names a job, node or service that does not exist."""


class Conflict(RequestError):
    """The state does not allow it now (a name taken, an agent that must register again)."""


class Invalid(RequestError):
    """The request contradicts itself or the cluster (a dependency on no job)."""


class Unavailable(RequestError):
    """Nothing was done, and a retry may succeed (the store failed, the controller stops)."""


class InternalError(RequestError):
    """A bug in the controller: nothing of the request was done."""


STATUS: dict[type[RequestError], int] = {
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Invalid: 422,
    InternalError: 500,
    Unavailable: 503,
}


def status_of(e: RequestError) -> int:
    """The kinds are siblings: the first that ``e`` is gives its status (400: a bare one)."""
    return next((code for kind, code in STATUS.items() if isinstance(e, kind)), 400)


def of_core(e: ControllerError) -> RequestError:
    """What a caller hears of an event the core refused."""
    if isinstance(e, UnknownObject):
        return NotFound(str(e))
    return Conflict(str(e))


__all__ = [
    "RETRY_AFTER_S",
    "STATUS",
    "Conflict",
    "Forbidden",
    "InternalError",
    "Invalid",
    "NotFound",
    "RequestError",
    "Unavailable",
    "of_core",
    "status_of",
]
