"""The client of the Slurm shims and the CLI's fast paths (issue 12): the calls of
``calls.py`` over a plain socket (``wire.py``), answering with ``Row``s (the server's JSON, its
fields readable as attributes, as on the typed models), without httpx and pydantic, whose
imports alone cost a command most of its 150 ms; nor ``http.client``, which imports the
``email`` package."""

from __future__ import annotations

from gpufleet.client.calls import PAGE_MAX, Row, UserCalls
from gpufleet.client.failover import Failover, addresses
from gpufleet.client.wire import Connection

TYPE_CHECKING = False  # neither typing nor urllib.parse at run time (issue 27)
if TYPE_CHECKING:
    from typing import Any

    from gpufleet.base.settings import Settings

_HOST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")

__all__ = ["PAGE_MAX", "LeanClient", "Row", "connection", "row", "rows"]


def split(server: str) -> tuple[str, str | None, int | None, str]:
    """``server``'s (scheme, host, port, path) as ``urlsplit`` reads them: a plain
    ``http(s)://name[:port][/path]`` here, anything else by urllib.parse, imported then."""
    scheme, sep, rest = server.partition("://")
    netloc, slash, path = rest.partition("/")
    host, colon, port = netloc.partition(":")
    if (
        sep
        and scheme in ("http", "https")
        and host
        and set(host) <= _HOST
        and (not colon or (port.isascii() and port.isdigit() and 0 <= int(port) <= 65535))
        and not set(path) & {"?", "#"}
    ):
        return scheme, host, int(port) if port else None, slash + path
    from urllib.parse import urlsplit

    u = urlsplit(server)
    return u.scheme, u.hostname, u.port, u.path


def connection(server: str, ca: str | None = None, timeout: float = 30.0) -> Connection | Failover:
    """A wire connection to ``server`` (``http(s)://host[:port][/prefix]``); for
    ``URL,URL`` (controllers in high availability), one to whichever leads."""
    if "," in server:
        return Failover(addresses(server), lambda url: connection(url, ca, timeout))
    scheme, host, port, _ = split(server)
    https = scheme == "https"
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"server {server!r}: not an http(s)://host[:port] URL")
    return Connection(host, port or (443 if https else 80), https=https, ca=ca,
                      timeout=timeout)  # fmt: skip


class LeanClient(UserCalls):
    def __init__(self, settings: Settings, timeout: float = 30.0) -> None:
        conn = connection(settings.server, settings.ca, timeout)
        base = split(settings.server.split(",")[0].strip())[3]
        super().__init__(conn, settings.token, base=base, typed=False)
        self.conn = conn


def row(answer: Any) -> Row:
    """A lean client's answer as what it is, a ``Row`` (its calls are typed as the SDK's
    models, whose fields a Row reads alike): for code that reads it as a mapping too."""
    if not isinstance(answer, Row):
        raise TypeError(f"not a lean client's answer: {type(answer).__name__}")
    return answer


def rows(answers: Any) -> list[Row]:
    return [row(a) for a in answers]
