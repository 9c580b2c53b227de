"""The controller service: every step together, and its life (start, stop, the gateway's
load sampler). What each step does is in its own module:

- ``loop.py``: the turn loop (one batch of requests per turn, then the core's driver steps);
- ``intake.py``: group commit of submissions;
- ``recovery.py``: the store down, the rebuild from it (and the start, which reads the same);
- ``agents.py``: agents' registrations, heartbeats and leases, their reports;
- ``requests.py``: users' and admins' requests, each awaiting its turn;
- ``services.py``: requests about services;
- ``store.py``: what all of them need of the store (a Protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gpufleet.server.service.agents import Agents
from gpufleet.server.service.loop import TurnLoop
from gpufleet.server.service.services import ServiceRequests

log = logging.getLogger("gpufleet.controller")


class ControllerService(TurnLoop, Agents, ServiceRequests):
    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._restore()
        self._task = asyncio.create_task(self._run(), name="gpufleet-controller-loop")
        if self.gateway is not None:
            self._sampler = asyncio.create_task(self._sample(), name="gpufleet-gateway-load")

    async def stop(self) -> None:
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            await self._task
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        if self.gateway is not None:
            # waits for an apply under way and the proxy's stop: off the loop
            await asyncio.to_thread(self.gateway.stop)

    async def _sample(self) -> None:
        """The gateway's request rates into the core (the autoscaler's input), every
        ``stats_s`` (the counters are read on the gateway's thread, between its applies)."""
        assert self.gateway is not None
        gw = self.gateway
        while not self._stopping:
            await asyncio.sleep(gw.stats_s)
            try:
                loads = await gw.sample(self.clock.now())
            except Exception:
                log.exception("reading the gateway's request counters failed")
                continue
            known = self.ctrl.services.services
            for ev in loads:
                if ev.name in known:
                    self.post(ev)
