"""An open-loop HTTP load at a fixed rate: what the failover benchmark and the end-to-end test
of a service's endpoint send through the gateway.

Request ``i`` is due at ``t0 + i / rate`` whether or not earlier ones have answered (open loop:
a stalled endpoint shows as failures and latency, not as a lower rate); a pool of threads sends
them with ``http.client`` on keep-alive connections, each with a timeout. Latency counts from
the due time, so time spent waiting for a free thread is in it (no coordinated omission).

A request sent on a reused connection that the other end had closed (it answered nothing: an
idle keep-alive connection a proxy closed, as nginx's old workers do after a reload) is sent
once more on a new one, as HTTP clients do for requests that may be repeated (GET, the default
here); ``Summary.resent`` counts those. Everything else that is not a 2xx answer is a failure:
by kind (``http 503``, ``ConnectionRefusedError``, ``timeout``, …) with its time.
"""

from __future__ import annotations

import http.client
import queue
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class Result:
    due: float  # time.monotonic() when it was due
    latency_s: float  # from due to the end of the answer (or the error)
    status: int | None  # None: no HTTP answer
    error: str  # "" for a 2xx answer, else its kind
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass(frozen=True, slots=True)
class Summary:
    sent: int
    ok: int
    failed: int
    by_kind: dict[str, int]
    first_failure: float | None  # monotonic due time
    last_failure: float | None
    p50_ms: float
    p99_ms: float
    resent: int = 0  # of the whole run, not only of the window

    def line(self, t0: float = 0.0) -> str:
        kinds = ", ".join(f"{k}: {n}" for k, n in sorted(self.by_kind.items())) or "none"
        when = (
            f" (from +{self.first_failure - t0:.2f} s to +{self.last_failure - t0:.2f} s)"
            if self.first_failure is not None and self.last_failure is not None
            else ""
        )
        return (
            f"{self.sent} sent, {self.ok} ok, {self.failed} failed [{kinds}]{when}; "
            f"p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms; {self.resent} resent"
        )


def summarize(
    results: list[Result], since: float | None = None, until: float | None = None, resent: int = 0
) -> Summary:
    """Of the requests due in [since, until)."""
    rs = [
        r for r in results if (since is None or r.due >= since) and (until is None or r.due < until)
    ]
    failed = [r for r in rs if not r.ok]
    kinds: dict[str, int] = {}
    for r in failed:
        kinds[r.error] = kinds.get(r.error, 0) + 1
    lat = sorted(r.latency_s * 1000 for r in rs if r.ok)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")

    return Summary(
        sent=len(rs),
        ok=len(rs) - len(failed),
        failed=len(failed),
        by_kind=kinds,
        first_failure=min((r.due for r in failed), default=None),
        last_failure=max((r.due for r in failed), default=None),
        p50_ms=statistics.median(lat) if lat else float("nan"),
        p99_ms=pct(0.99),
        resent=resent,
    )


@dataclass
class LoadGen:
    """``rate`` requests/s of ``method path`` to ``url`` until ``stop()`` (or ``seconds``)."""

    url: str
    rate: float
    token: str | None = None
    path: str = "/"
    method: str = "GET"
    timeout_s: float = 5.0
    threads: int = 16
    seconds: float | None = None
    keep_body: bool = False  # keep each answer's body (which replica answered)
    results: list[Result] = field(default_factory=list)
    resent: int = 0
    t0: float = 0.0

    def __post_init__(self) -> None:
        u = urlsplit(self.url)
        if u.scheme != "http" or not u.hostname or not u.port:
            raise ValueError(f"load target {self.url!r}: need http://HOST:PORT")
        if not 0 < self.rate <= 100_000 or self.threads < 1 or self.timeout_s <= 0:
            raise ValueError(
                f"load: rate {self.rate!r} (0-100000), threads {self.threads!r} (>= 1), "
                f"timeout {self.timeout_s!r} s (> 0)"
            )
        self.host, self.port = u.hostname, u.port
        self._headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._due: queue.Queue[float | None] = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # ----- control --------------------------------------------------------------------------

    def start(self) -> LoadGen:
        self.t0 = time.monotonic()
        self._threads = [
            threading.Thread(target=self._worker, name=f"load-{i}", daemon=True)
            for i in range(self.threads)
        ]
        self._threads.append(threading.Thread(target=self._pace, name="load-pace", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> list[Result]:
        """Stop sending; wait for the requests in flight (each ends within its timeout)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.timeout_s * 2 + 5)
        return self.snapshot()

    def wait(self) -> list[Result]:
        """With ``seconds``: until the last request was sent and answered."""
        pacer = self._threads[-1]
        pacer.join()
        return self.stop()

    def snapshot(self) -> list[Result]:
        with self._lock:
            return list(self.results)

    def summary(self, since: float | None = None, until: float | None = None) -> Summary:
        return summarize(self.snapshot(), since, until, self.resent)

    def __enter__(self) -> LoadGen:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- the threads ----------------------------------------------------------------------

    def _pace(self) -> None:
        i = 0
        end = None if self.seconds is None else self.t0 + self.seconds
        while not self._stop.is_set():
            due = self.t0 + i / self.rate
            if end is not None and due >= end:
                break
            wait = due - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                break
            self._due.put(due)
            i += 1
        for _ in range(self.threads):
            self._due.put(None)

    def _worker(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while True:
            due = self._due.get()
            if due is None:
                break
            r, conn = self._one(due, conn)
            with self._lock:
                self.results.append(r)
        if conn is not None:
            conn.close()

    def _one(
        self, due: float, conn: http.client.HTTPConnection | None
    ) -> tuple[Result, http.client.HTTPConnection | None]:
        for _attempt in range(2):
            reused = conn is not None
            if conn is None:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                conn.request(self.method, self.path, headers=self._headers)
                resp = conn.getresponse()
                body = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                conn = None
                if reused:  # an idle connection the other end closed: once more, on a new one
                    with self._lock:
                        self.resent += 1
                    continue
                return self._failed(due, _kind(e)), None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                return self._failed(due, _kind(e)), None
            if resp.will_close:
                conn.close()
                conn = None
            status = resp.status
            return (
                Result(
                    due,
                    time.monotonic() - due,
                    status,
                    "" if 200 <= status < 300 else f"http {status}",
                    body if self.keep_body else b"",
                ),
                conn,
            )
        raise AssertionError("unreachable: the second attempt always returns")

    def _failed(self, due: float, kind: str) -> Result:
        return Result(due, time.monotonic() - due, None, kind)


def _kind(e: BaseException) -> str:
    if isinstance(e, socket.timeout | TimeoutError):
        return "timeout"
    return type(e).__name__
