"""A new leader gives the lead up to a standby's claim (ADR 0048) only once the agents have had
``agent_silence_s`` to find it: the wait starts at its election, even where its first renewal
comes after the takeover finished. (A standby's claim against a former controller at the same
address deposed a leader 0.26 s after its election: the HA chaos test's load flake.)"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.base.clock import ManualClock
from gpufleet.server.ha.controller import YIELD_ENV, HighAvailability

CLAIMS = {"http://standby:8600": frozenset({"node-0"})}  # node-0 reaches the standby only


def elected_at(clock: ManualClock) -> HighAvailability:
    """A controller just elected (its takeover run, with stand-ins for the store and the
    service), whose one agent has not spoken to it yet."""
    h = HighAvailability.__new__(HighAvailability)
    h.service = SimpleNamespace(
        clock=clock, outbox=SimpleNamespace(term=0), bodies=None,
        links={"node-0": SimpleNamespace(registered=True, last_seen=0.0)},
    )  # fmt: skip
    h.store = SimpleNamespace(fence_epoch=0)
    h.book = SimpleNamespace(times=SimpleNamespace(lease_s=3.0))
    h.agent_silence_s = 10.0
    h.started = False
    h._acting_since = 0.0

    async def lead() -> None:
        return None

    h._lead = lead
    h.read_ahead = SimpleNamespace(stop=lambda: Bodies())
    asyncio.run(h._elected(7))
    return h


class Bodies(list[Any]):
    decoded = 0


def test_a_claim_right_after_the_election_does_not_depose_the_new_leader() -> None:
    clock = ManualClock(1000.0)
    h = elected_at(clock)
    assert h.started and h.store.fence_epoch == 7
    clock.advance(0.26)  # its first renewal after the takeover: started already
    assert h._outvoted(False, CLAIMS) == ""
    clock.advance(9.0)
    assert h._outvoted(False, CLAIMS) == ""
    assert h.started


def test_once_the_agents_had_the_time_a_claim_still_gives_the_lead_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(YIELD_ENV, "0")  # giving up sets it for the next process: put back after
    clock = ManualClock(1000.0)
    h = elected_at(clock)
    clock.advance(10.5)  # node-0 never spoke to it: it reaches the standby only
    why = h._outvoted(False, CLAIMS)
    assert "reach the standby at http://standby:8600" in why, why
    assert not h.started and h.store.fence_epoch == 0
