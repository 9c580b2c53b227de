"""The agent's three I/O threads, each a loop around one of its ``*_once`` steps, and its tick
loop (the caller's thread).

Every loop survives any exception (logged once, then retried with a back-off), so no thread of
the agent ever dies of one; each waits on the agent's stop event, never a bare sleep.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import httpx

from gpufleet.agent.backoff import Backoff
from gpufleet.client.errors import ApiError

if TYPE_CHECKING:
    from gpufleet.agent.agent import Agent

BACKOFF_MAX_S = 5.0
# the tick's pace while nothing runs on the node: what a tick watches (tasks' exits, kills'
# grace, probes, a heal step's load) comes only with a command, which wakes the loop at once
IDLE_TICK_S = 0.5
IDLE_SHIP_S = 1.0  # the shipper's pace with nothing to ship and nothing running


class StopEvent(threading.Event):
    """The agent's stop (``run_agent``'s): set, it also wakes a tick loop sleeping while idle."""

    def __init__(self, wake: threading.Event) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake.set()


def ticks(agent: Agent, stop: threading.Event, until: float | None) -> None:
    """Tick every ``tick_s`` until ``stop`` (or ``until`` on the agent's clock); while the node
    is idle (``Agent.idle``) every ``IDLE_TICK_S``, woken by the next command acted on: ten
    ticks a second were a third of an idle agent's CPU. A plain Event for ``stop`` (it cannot
    wake an idle wait) keeps every tick."""
    wakeable = isinstance(stop, StopEvent)
    while not agent._stop.is_set():
        if wakeable and agent.idle():
            agent._wake_tick.wait(max(IDLE_TICK_S, agent.config.tick_s))
            agent._wake_tick.clear()
            if stop.is_set():
                break
        elif stop.wait(agent.config.tick_s):
            break
        if agent._stop.is_set():
            break
        try:
            agent.tick_once()
            agent._ok("tick")
        except Exception as e:  # a failed tick is retried at the next one
            agent._crashed("tick", e)
        if until is not None and agent.clock.now() >= until:
            break


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
            # new log bytes are picked up at this pace; an idle node makes none (its events,
            # a heal step's answer, wake the loop), and its four wakes a second cost CPU
            agent._wake_ship.wait(IDLE_SHIP_S if _quiet(agent) else 0.25)
        else:
            agent._stop.wait(backoff.next())
        agent._wake_ship.clear()


def _quiet(agent: Agent) -> bool:
    """Nothing that could leave something to ship: no task, log tail or node command."""
    return agent.idle() and not agent.logs.pending() and not agent.node_commands.running()
