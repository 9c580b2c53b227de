"""The client of the Slurm shims and the CLI's fast paths (issue 12): the calls of
``calls.py`` over a plain socket (``wire.py``), answering with ``Row``s (the server's JSON, its
fields readable as attributes, as on the typed models), without httpx and pydantic, whose
imports alone cost a command most of its 150 ms; nor ``http.client``, which imports the
``email`` package."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from gpufleet.base.settings import Settings
from gpufleet.client.calls import PAGE_MAX, Row, UserCalls
from gpufleet.client.wire import Connection

__all__ = ["PAGE_MAX", "LeanClient", "Row", "connection", "row", "rows"]


def connection(server: str, ca: str | None = None, timeout: float = 30.0) -> Connection:
    """A wire connection to ``server`` (``http(s)://host[:port][/prefix]``)."""
    u = urlsplit(server)
    https = u.scheme == "https"
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"server {server!r}: not an http(s)://host[:port] URL")
    return Connection(u.hostname, u.port or (443 if https else 80), https=https, ca=ca,
                      timeout=timeout)  # fmt: skip


class LeanClient(UserCalls):
    def __init__(self, settings: Settings, timeout: float = 30.0) -> None:
        conn = connection(settings.server, settings.ca, timeout)
        super().__init__(conn, settings.token, base=urlsplit(settings.server).path, typed=False)
        self.conn = conn


def row(answer: Any) -> Row:
    """A lean client's answer as what it is, a ``Row`` (its calls are typed as the SDK's
    models, whose fields a Row reads alike): for code that reads it as a mapping too."""
    if not isinstance(answer, Row):
        raise TypeError(f"not a lean client's answer: {type(answer).__name__}")
    return answer


def rows(answers: Any) -> list[Row]:
    return [row(a) for a in answers]
