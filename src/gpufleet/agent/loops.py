"""The agent's three I/O threads, each a loop around one of its ``*_once`` steps.

Every loop survives any exception (logged once, then retried with a back-off), so no thread of
the agent ever dies of one; each waits on the agent's stop event, never a bare sleep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from gpufleet.agent.backoff import Backoff
from gpufleet.client.errors import ApiError

if TYPE_CHECKING:
    from gpufleet.agent.agent import Agent

BACKOFF_MAX_S = 5.0


def heartbeat(agent: Agent) -> None:
    backoff = Backoff(0.5, BACKOFF_MAX_S, agent._rng)
    while not agent._stop.is_set():
        try:
            ok = agent.heartbeat_once()
        except Exception as e:
            agent._crashed("heartbeat", e)
            ok = False
        if ok or agent.state.registered:
            backoff.reset()
            wait = agent.heartbeat_s
        else:  # not registered yet: retry sooner than a heartbeat period
            wait = backoff.next()
        agent._wake_heartbeat.wait(wait)  # the stop sets it too
        agent._wake_heartbeat.clear()


def commands(agent: Agent) -> None:
    backoff = Backoff(0.5, BACKOFF_MAX_S, agent._rng)
    while not agent._stop.is_set():
        try:
            if not agent.state.registered or agent.backend.frozen(agent.clock.now()):
                agent._stop.wait(0.2)
                continue
            agent.commands_once()
            agent._ok("commands")
            backoff.reset()
        except (httpx.HTTPError, ApiError) as e:
            agent._failed("commands", e)
            if not isinstance(e, ApiError) or e.status in (409, 503):
                # the controller is gone, restarted or another leads: heartbeat (and
                # register) now, not a heartbeat period later
                agent._wake_heartbeat.set()
            agent._stop.wait(backoff.next())
        except Exception as e:
            agent._crashed("commands", e)
            agent._stop.wait(backoff.next())


def shipping(agent: Agent) -> None:
    backoff = Backoff(0.2, BACKOFF_MAX_S, agent._rng)
    while not agent._stop.is_set():
        try:
            shipped = agent.ship_once()
        except Exception as e:
            agent._crashed("shipping", e)
            shipped = False
        if shipped:
            backoff.reset()
            agent._wake_ship.wait(0.25)  # new log bytes are picked up at this pace
        else:
            agent._stop.wait(backoff.next())
        agent._wake_ship.clear()
