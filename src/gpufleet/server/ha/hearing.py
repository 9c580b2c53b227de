"""What a standby hears from agents that cannot reach the leader (ADR 0048). An agent given
several controllers' addresses names, on each request to another, the addresses it failed
to reach lately (``X-Gpufleet-Unreached``, set by ``client/failover.py``); the standby's gate
notes the node (its agent token says which) when the leader's address is among them. The
elector writes what was heard within the window to the store as this standby's claim, and
the leader steps down when a claim shows it cut off from most of its agents."""

from __future__ import annotations

import threading

UNREACHED_HEADER = "x-gpufleet-unreached"


def addresses(value: str) -> frozenset[str]:
    return frozenset(u.strip().rstrip("/") for u in value.split(",") if u.strip())


class Hearing:
    """The nodes that told this standby they cannot reach an address, and when (on this
    process's monotonic clock). Written by the gate (the loop), read by the elector (its
    thread)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s  # a report counts this long
        self._lock = threading.Lock()
        self._told: dict[str, tuple[frozenset[str], float]] = {}

    def told(self, node: str, unreached: frozenset[str], now: float) -> None:
        with self._lock:
            self._told[node] = (unreached, now)

    def cut_off_from(self, leader: str, now: float) -> frozenset[str]:
        """The nodes that told us within the window that they cannot reach ``leader``."""
        leader = leader.rstrip("/")
        if not leader:
            return frozenset()
        with self._lock:
            for node in [n for n, (_, t) in self._told.items() if now - t > self.window_s]:
                del self._told[node]  # forgotten: the map holds the nodes of one window
            return frozenset(n for n, (urls, _) in self._told.items() if leader in urls)
