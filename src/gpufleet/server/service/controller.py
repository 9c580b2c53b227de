"""The controller service: every step together, and its life (start, stop, the gateway's
load sampler). What each step does is in its own module:

- ``loop.py``: the turn loop (one batch of requests per turn, then the core's driver steps);
- ``intake.py``: group commit of submissions;
- ``recovery.py``: the store down, the rebuild from it (and the start, which reads the same);
- ``agents.py``: agents' registrations, heartbeats and leases, their reports;
- ``requests.py``: users' and admins' requests, each awaiting its turn;
- ``services.py``: requests about services;
- ``reservations.py``: admins' advance reservations (maintenance windows);
- ``identity.py``: the nodes' Unix accounts, asked about the users the controller meets;
- ``nodecommands.py``: operators' commands run on a node through its agent;
- ``maintenance.py``: rolling maintenance, driven here (core/rollout.py decides);
- ``healremedy.py``: the heal loop's site remedy, run as such a command;
- ``store.py``: what all of them need of the store (a Protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gpufleet.server.service.agents import Agents
from gpufleet.server.service.healremedy import HealRemedies
from gpufleet.server.service.loop import TurnLoop
from gpufleet.server.service.maintenance import MaintenanceRequests
from gpufleet.server.service.reservations import ReservationRequests
from gpufleet.server.service.services import ServiceRequests

log = logging.getLogger("gpufleet.controller")


class ControllerService(
    TurnLoop, Agents, ServiceRequests, ReservationRequests, MaintenanceRequests, HealRemedies
):
    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._restore()
        self._task = asyncio.create_task(self._run(), name="gpufleet-controller-loop")
        self.start_maintenance()
        if self.gateway is not None:
            self._sampler = asyncio.create_task(self._sample(), name="gpufleet-gateway-load")

    async def stop(self) -> None:
        await self.stop_maintenance()
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
        if self.power:
            await asyncio.to_thread(self.close_power)

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
