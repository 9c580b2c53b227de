"""What the controller knows of each agent's link: where it listens, what it last said, and
where its registration stands. Its lease is timed by ``core.liveness`` (the service renews it
on each answered heartbeat and registration)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.api import schemas as s


@dataclass
class NodeLink:
    address: str
    last_seen: float
    health: s.Health = field(default_factory=s.Health)
    metrics: dict[str, Any] = field(default_factory=dict)
    driver_version: str = ""
    cuda_version: str = ""
    gpu_info: list[s.GpuInfo] = field(default_factory=list)  # as registered (GET /nodes)
    reported: bool = False  # a heartbeat's health reached the core since (re-)registration
    # registered with this controller process and reconciled: until then (after our restart)
    # its heartbeats and long-polls are refused with 409, so that it registers again, listing
    # the tasks it still runs, and no launch reaches it that the reconcile would not know of
    registered: bool = True
    epoch: int = 0  # its registration's number (rising, across our restarts too)
    # registered with this process before a rebuild from the store, and not yet again: its
    # heartbeats keep its lease (this process never declared its node lost, and places
    # nothing there until the reconcile) and ask it to register again. Without this, a store
    # that took the rebuild's reads and probe but not the registration's writes (a full disk
    # whose WAL had room for the probe) let the lease lapse, and the watchdog killed tasks
    # that the rebuilt memory rightly held as running: their jobs ran a second attempt.
    rejoining: bool = False
