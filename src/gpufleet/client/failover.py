"""A transport over several controllers' addresses (``URL,URL``: controllers in high
availability, ADR 0032) that follows the leader: a standby answers 503 with
``X-Gpufleet-Role: standby`` and, when it knows, the leader's address (``X-Gpufleet-Leader``),
and the request goes there; an address that cannot be reached is skipped for the next. Once
a full round found no leader (one is being elected), it waits a moment and goes round again,
for at most ``patience_s``.

A request is sent again elsewhere only where it cannot have been done: a standby's 503 does
nothing, and a connection that was never made sent nothing. A failure mid-request is resent
only for a read (GET, HEAD) or a submission that carries an idempotency key (the leader
stores it once whatever reaches it twice); any other write's failure is raised, as with one
address. Light: the shims import it."""

from __future__ import annotations

import time

from gpufleet.client.transport import Response

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from gpufleet.client.transport import Transport

ROLE_HEADER = "x-gpufleet-role"
LEADER_HEADER = "x-gpufleet-leader"
UNREACHED_HEADER = "x-gpufleet-unreached"  # the addresses a request failed at lately
# what a failed connect raises: the built-in errors (the wire's socket) and httpx's, by name
_NOT_SENT = (ConnectionRefusedError, ConnectionAbortedError, TimeoutError)
_NOT_SENT_NAMES = frozenset({"ConnectError", "ConnectTimeout"})
_READS = frozenset({"GET", "HEAD"})
_KEYED = b'"idempotency_key"'


def addresses(server: str) -> list[str]:
    """``URL,URL,…`` as its addresses, each without a trailing slash (one: a list of one)."""
    urls = [u.strip().rstrip("/") for u in server.split(",") if u.strip()]
    if not urls:
        raise ValueError(f"server {server!r}: no address")
    return urls


def _not_sent(e: BaseException) -> bool:
    return isinstance(e, _NOT_SENT) or type(e).__name__ in _NOT_SENT_NAMES


class Failover:
    """A ``transport.Transport`` over the controllers at ``urls`` (each through its own
    transport, made by ``make`` when first used).

    An address whose request failed (no connection, or no answer) is avoided for ``avoid_s``
    while another is not: requests go elsewhere, a standby's pointer to it is not followed
    (a partitioned leader costs a timeout once, not at every try), and every request to
    another address names it (``X-Gpufleet-Unreached``): a standby an agent reaches so learns
    that the agent cannot reach the leader (ADR 0048)."""

    def __init__(
        self,
        urls: list[str],
        make: Callable[[str], Transport],
        *,
        patience_s: float = 30.0,
        pause_s: float = 0.2,
        avoid_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.urls = list(urls)
        self.current = self.urls[0]
        self._make = make
        self._open: dict[str, Transport] = {}
        self.patience_s, self.pause_s, self.avoid_s = patience_s, pause_s, avoid_s
        self._sleep, self._now = sleep, now
        self._failed: dict[str, float] = {}  # address: when a request to it last failed

    def transport(self, url: str | None = None) -> Transport:
        url = url or self.current
        t = self._open.get(url)
        if t is None:
            t = self._open[url] = self._make(url)
        return t

    @property
    def http(self) -> Any:
        """The current address's httpx client (the SDK's ``Client.http``)."""
        return getattr(self.transport(), "http", None)

    def close(self) -> None:
        for t in self._open.values():
            t.close()
        self._open.clear()

    def unreached(self) -> list[str]:
        """The addresses a request failed at within ``avoid_s``."""
        now = self._now()
        return [u for u, t in list(self._failed.items()) if now - t < self.avoid_s]

    def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None = None,
        *,
        timeout: float | None = None,
    ) -> Response:
        deadline = self._now() + self.patience_s
        missed = 0  # addresses in a row that were no leader
        last: Response | None = None  # a standby's answer, given when the patience is spent
        while True:
            url, avoided = self.current, self.unreached()
            if url in avoided and len(avoided) < len(self.urls):  # others first
                if self._next(missed := missed + 1, deadline):
                    continue
                if last is not None:
                    return last
                raise ConnectionError(f"no controller reached (avoiding {', '.join(avoided)})")
            try:
                r = self.transport(url).request(
                    method, target, _naming(headers, avoided, url), body, timeout=timeout
                )
            except Exception as e:
                self._failed[url] = self._now()
                if not (_not_sent(e) or method in _READS or (body and _KEYED in body)):
                    self._step()  # the next request starts elsewhere
                    raise
                if not self._next(missed := missed + 1, deadline):
                    raise
                continue
            self._failed.pop(url, None)
            if r.status != 503 or r.headers.get(ROLE_HEADER) != "standby":
                return r
            last = r
            leader = r.headers.get(LEADER_HEADER, "").rstrip("/")
            shunned = leader in avoided and len(avoided) < len(self.urls)
            if leader and leader != url and missed < 2 * len(self.urls) and not shunned:
                if leader not in self.urls:
                    self.urls.append(leader)
                self.current = leader
                missed += 1
                continue
            if not self._next(missed := missed + 1, deadline):
                return r  # no leader within our patience: the standby's answer says why

    def _step(self) -> None:
        self.current = self.urls[(self.urls.index(self.current) + 1) % len(self.urls)]

    def _next(self, missed: int, deadline: float) -> bool:
        """On to the next address; after a whole round without a leader, a pause. False once
        the patience is spent."""
        self._step()
        if missed % len(self.urls) == 0:
            if self._now() + self.pause_s > deadline:
                return False
            self._sleep(self.pause_s)
        return True


def _naming(headers: dict[str, str], avoided: list[str], url: str) -> dict[str, str]:
    others = [u for u in avoided if u != url]
    return {**headers, UNREACHED_HEADER: ",".join(others)} if others else headers
