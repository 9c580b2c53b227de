"""Submissions at a fixed rate through every controller's address while the failover bench
kills leaders (``bench/ha_failover.py --load RATE``): open loop (submission ``i`` is due at
``t0 + i / rate``), each with an idempotency key and sent again on a 503 or a lost connection
until accepted, as a client should. What was accepted is audited against the store."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from gpufleet.base.settings import Settings
from gpufleet.client import ApiError, Client
from gpufleet.client.lean import LeanClient
from gpufleet.server.store import Store


@dataclass
class Load:
    url: str
    token: str
    rate: float
    gate: str  # every load job waits for this job to succeed (it never does): none runs
    threads: int = 128
    lean: bool = True  # the plain-socket client of the CLI and the shims (else the SDK's httpx)
    accepted: dict[str, str] = field(default_factory=dict)  # key → id
    retries: Counter[str] = field(default_factory=Counter)
    errors: list[BaseException] = field(default_factory=list)
    late_s: float = 0.0  # the most a submission was accepted after it was due
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: itertools.count[int] = field(default_factory=itertools.count)
    _threads: list[threading.Thread] = field(default_factory=list)
    t0: float = 0.0
    _until: float = float("inf")  # no submission due after this is sent (a drain)
    stopped: float = 0.0
    sent: int = 0  # submissions begun (each sent until accepted, or an error)
    drained_s: float = 0.0  # from the stop until the last due one was accepted

    def start(self) -> Load:
        self.t0 = time.monotonic()
        self._threads = [threading.Thread(target=self._run) for _ in range(self.threads)]
        for t in self._threads:
            t.start()
        return self

    def stop(self, drain: bool = False) -> float:
        """Stop; the submissions per second that were accepted while the load ran. ``drain``:
        every submission due by now is still sent (the backlog a failover left) until accepted;
        ``drained_s`` says how long that took."""
        self.stopped = time.monotonic()
        rate = len(self.accepted) / max(1e-9, self.stopped - self.t0)
        if drain:
            self._until = self.stopped
        else:
            self._stop.set()
        for t in self._threads:
            t.join(300)
        self.drained_s = time.monotonic() - self.stopped
        return rate

    def _client(self) -> Client | LeanClient:
        if self.lean:
            return LeanClient(Settings(self.url, self.token, ""), timeout=30)
        return Client(self.url, self.token, timeout=30)

    def _run(self) -> None:
        c = self._client()
        try:
            while not self._stop.is_set():
                with self._lock:
                    i = next(self._next)
                due = self.t0 + i / self.rate
                if due > self._until:  # draining: only what was due before the stop
                    return
                if (wait := due - time.monotonic()) > 0 and self._stop.wait(wait):
                    return
                with self._lock:
                    self.sent += 1
                try:
                    self._one(c, i)
                except BaseException as e:
                    self.errors.append(e)
                    return
                with self._lock:
                    self.late_s = max(self.late_s, time.monotonic() - due)
        finally:
            c.close()

    def _one(self, c: Client | LeanClient, i: int) -> None:
        spec = {"name": f"load-{i}", "gpus_per_worker": 1, "command": ["/bin/true"]}
        deadline = time.monotonic() + 120
        while True:
            try:
                (jid,) = c.submit(spec, depends_on=[("afterok", self.gate)],
                                  idempotency_key=f"load-{i}")  # fmt: skip
                break
            except (httpx.TransportError, OSError, ApiError) as e:
                what = f"{e.status}" if isinstance(e, ApiError) else type(e).__name__
                with self._lock:
                    self.retries[what] += 1
                if (isinstance(e, ApiError) and e.status != 503) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with self._lock:
            self.accepted[f"load-{i}"] = jid

    def audit(self, db_url: str) -> tuple[int, int]:
        """(accepted and not stored once under the id the client got, stored and never
        accepted): both 0 when nothing accepted was lost and nothing was stored twice."""
        with Store.open(db_url, migrate=False) as store:
            rows = [j for j in store.list_jobs(limit=None) if j.spec.name.startswith("load-")]
        keys = Counter(j.idempotency_key for j in rows)
        stored = {j.idempotency_key: j.id for j in rows}
        lost = sum(1 for k, v in self.accepted.items() if stored.get(k) != v or keys[k] != 1)
        extra = sum(1 for k in stored if k not in self.accepted)
        return lost, extra
