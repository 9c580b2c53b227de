"""When the controller declares a node lost: node grace after the last heartbeat it answered,
on the monotonic clock (a wall clock stepped by NTP must not make it early), and counted from
heartbeats and registrations only (other agent traffic does not renew the agent's lease). The
timers are the core's (``core/liveness.py``, tests/unit/test_core_liveness.py); this checks
what the service feeds them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from builders import node_spec, profile

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.core.events import NodeLost, NodeUp
from gpufleet.server.logs import LogStore
from gpufleet.server.service import ControllerService, NodeLink

T0 = 1_700_000_000.0


class Mono:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def service(tmp_path: Path) -> tuple[ControllerService, ManualClock, Mono]:
    clock, mono = ManualClock(T0), Mono()
    svc = ControllerService(
        None,  # type: ignore[arg-type]  # nothing here reaches the store
        profile(),
        clock,
        logs=LogStore(tmp_path),
        monotonic=mono,
        min_pass_gap_s=0.0,
    )
    svc.ctrl.handle(T0, NodeUp(node_spec("n00")), schedule=False)
    svc.links["n00"] = NodeLink("127.0.0.1", T0)
    svc.liveness.renewed("n00", mono())  # as its registration's answer does
    return svc, clock, mono


def lost(svc: ControllerService) -> list[NodeLost]:
    """What the driver's next tick would declare lost (the loop passes ``lease_now``)."""
    return svc.driver.expire(svc.lease_now())


def test_a_wall_clock_step_does_not_make_a_node_lost(tmp_path: Path) -> None:
    svc, clock, mono = service(tmp_path)
    clock.advance(3600)  # NTP stepped the wall clock an hour ahead
    mono.t += 1.0
    assert lost(svc) == []


def test_a_node_is_lost_past_the_grace_since_the_last_answered_heartbeat(tmp_path: Path) -> None:
    svc, _, mono = service(tmp_path)
    mono.t += 8.0
    svc.heartbeat("n00", s.Heartbeat())  # answered: the agent's lease runs from before this
    mono.t += 9.9
    svc._wake = asyncio.Event()  # the loop is not running: the (empty) report needs no turn
    asyncio.run(svc.agent_events("n00", []))  # other traffic does not count as a renewal
    assert lost(svc) == []
    mono.t += 0.2  # 10.1 s after the answer, grace 10 s
    (ev,) = lost(svc)
    assert ev.node == "n00" and "grace 10 s" in ev.why
