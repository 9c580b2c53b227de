"""The gateway of ``--gateway remote``: the proxy is a process of its own (``gpufleet
gateway``, ops/gatewayd.py) that follows whichever controller leads, as agents do, and keeps
serving the routes it last had while none answers (ADR 0044). The controller's side is this
``Gateway``: ``apply`` publishes the whole set and waits until the gateway process says it
serves it (its next sync, ``POST /api/v1/gateway/sync``), so the order the executor keeps (a
replica out of the routes before its Kill) holds as with a local proxy; ``stats`` are the
counters that process sent with its last sync.

Versions count per controller process (``instance``, random): a gateway's acknowledgement of
an older leader's version says nothing about this one's routes. Used on the proxy's worker
thread (apply, stats) and on the event loop (``sync``): a lock between them.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from gpufleet.gateway import Gateway, GatewayError, ServiceRoute, ServiceStats, validate

APPLY_WAIT_S = 10.0  # a gateway process syncs at least every few seconds (its long-poll)


@dataclass(frozen=True, slots=True)
class Published:
    instance: str
    version: int
    routes: tuple[ServiceRoute, ...]


class RemoteGateway(Gateway):
    kind = "remote"

    def __init__(self, bind_host: str = "127.0.0.1", apply_wait_s: float = APPLY_WAIT_S) -> None:
        super().__init__(bind_host)
        self.instance = secrets.token_hex(8)
        self.apply_wait_s = apply_wait_s
        self._cond = threading.Condition()
        self._published = Published(self.instance, 0, ())
        self._acked = 0  # the newest of our versions a gateway process serves
        self._stats: dict[str, ServiceStats] = {}
        self.synced_at: float | None = None  # monotonic: the gateway process's last sync
        self.proxy = ""  # the proxy the gateway process said it runs ("" not yet said)

    def start(self) -> None:  # the proxy is the gateway process's: nothing runs here
        pass

    def stop(self) -> None:
        pass

    def apply(self, services: list[ServiceRoute]) -> None:
        validate(services)
        with self._cond:
            v = self._published.version + 1
            self._published = Published(self.instance, v, tuple(services))
            if not self._cond.wait_for(lambda: self._acked >= v, self.apply_wait_s):
                raise GatewayError(
                    f"no gateway process served the routes within {self.apply_wait_s:g} s "
                    "(is `gpufleet gateway --controller …` running?)"
                )

    def stats(self) -> dict[str, ServiceStats]:
        with self._cond:
            return dict(self._stats)

    # ----- the gateway process's sync (on the event loop) -----------------------------------

    def published(self) -> Published:
        with self._cond:
            return self._published

    def report(
        self, instance: str, applied: int, stats: dict[str, ServiceStats], proxy: str = ""
    ) -> None:
        """What the gateway process serves (``applied`` of ``instance``), its counters and
        the proxy it runs."""
        with self._cond:
            self.synced_at = time.monotonic()
            self.proxy = proxy or self.proxy
            self._stats = dict(stats)
            if instance == self.instance and applied > self._acked:
                self._acked = applied
                self._cond.notify_all()


def answerable(p: Published, instance: str, known: int, coming: bool) -> bool:
    """Whether a gateway process's sync (it serves version ``known`` of ``instance``) may be
    answered with ``p`` now. A process that published nothing yet (version 0) answers its
    empty set only when no route is on its way (``coming``: its takeover opened services whose
    first set the proxy's worker thread has not published yet); answered empty, the gateway
    process would close every endpoint until the first set came (issue 26: 10 requests
    refused in 110 ms after a failover). Otherwise a newer set, or this process's first answer
    to a gateway that followed another one."""
    if p.version == 0:
        return not coming
    return p.instance != instance or p.version > known


def routes_json(p: Published) -> dict[str, Any]:
    return {
        "instance": p.instance,
        "version": p.version,
        "routes": [
            {
                "name": r.name,
                "port": r.listen_port,
                "token": r.token,
                "backends": [f"{b.host}:{b.port}" for b in r.backends],
                # a desktop's only (an ordinary service's route is as it was)
                **({"viewers": list(r.viewers)} if r.viewers else {}),
                # each backend's key, in the backends' order (a desktop's replicas only)
                **({"keys": [b.key for b in r.backends]} if any(b.key for b in r.backends) else {}),
            }
            for r in p.routes
        ],
    }
