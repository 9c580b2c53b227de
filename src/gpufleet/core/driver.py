"""The one driver of the core, shared by the live controller and the simulator.

The role Dask's ``BaseWorker`` plays for its worker state machine: events in, commands out,
and one place that decides what happens between the two. It owns
- the inbox of events (``post``) and the timers the core sets (``SetTimer`` never leaves it);
- when a scheduling pass runs, by ``PassRule`` on the Clock's time: so a simulation of a
  workload schedules at the same moments as the live controller would, whatever the CPU;
- the journal hook: a step's commands are handed to ``Journal.commit`` (live: the store, in one
  transaction) before any of them reaches ``Executor.apply``; a commit that raises hands on
  nothing, and the caller throws the core away (memory holds only what the store committed);
- what is deliverable: a launch superseded later in the same step, or ranks already counted
  as gone, never reach the executor;
- node liveness (``core.liveness``), when given one: the nodes whose grace ran out are lost in
  the step where the rule's tick comes round (every step when it has no tick, as in the
  simulator), judged on the lease clock the caller passes in (``lease_now``).

The live service and the simulator are its two callers; they differ in their Clock (the wall,
or the time of the next event) and their Executor (the agents' outboxes, or an event heap).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.core.commands import Command, Launch, NodeEvent, SetTimer, Transition
from gpufleet.core.controller import Controller, ControllerError
from gpufleet.core.events import Event, NodeLost, TimerFired
from gpufleet.core.executor import Executor
from gpufleet.core.liveness import NodeLiveness


@dataclass(frozen=True, slots=True)
class PassRule:
    """When a scheduling pass runs: after a change, but no sooner than ``min_gap_s`` (Clock
    seconds) after the previous pass; and every ``tick_s`` even without a change (``None``: only
    on a change, as the simulator needs, where nothing happens between events).

    The gap bounds how much of the controller's time passes take under a burst of changes (a
    pass over thousands of pending jobs costs tens of ms or more), as Slurm defers its scheduler
    (``sched_min_interval``, ``batch_sched_delay``), but on the Clock, not on measured CPU time,
    so that the simulator, which shares the rule, schedules at the same moments."""

    min_gap_s: float = 0.0
    tick_s: float | None = None

    def __post_init__(self) -> None:
        if not self.min_gap_s >= 0:
            raise ValueError(f"pass rule: min gap {self.min_gap_s!r} s must be >= 0")
        if self.tick_s is not None and not self.tick_s > 0:
            raise ValueError(f"pass rule: tick {self.tick_s!r} s must be > 0")


@dataclass(slots=True)
class Step:
    """What one step did: the commands as committed and handed on, the events the core refused
    (with why), whether a scheduling pass ran, and whether the rule's tick came round."""

    now: float
    commands: list[Command]
    refused: list[tuple[Event, ControllerError]] = field(default_factory=list)
    scheduled: bool = False
    ticked: bool = False  # the rule's interval came round (a pass ran whatever changed)
    lost: list[str] = field(default_factory=list)  # nodes the liveness timers declared lost

    @property
    def transitions(self) -> list[Transition]:
        return [c for c in self.commands if isinstance(c, Transition)]

    @property
    def node_events(self) -> list[NodeEvent]:
        return [c for c in self.commands if isinstance(c, NodeEvent)]


class Journal(Protocol):
    def commit(self, step: Step) -> None:
        """Make the step's transitions (and node events) durable, or raise: then nothing of
        the step is handed to the executor."""
        ...


class NoJournal:
    """The simulator's journal: nothing outlives the run."""

    def commit(self, step: Step) -> None:
        return None


class Driver:
    def __init__(
        self,
        core: Controller,
        executor: Executor,
        journal: Journal | None = None,
        rule: PassRule | None = None,
        *,
        start: float | None = None,
        liveness: NodeLiveness | None = None,
    ) -> None:
        self.core = core
        self.executor = executor
        self.journal: Journal = journal if journal is not None else NoJournal()
        self.rule = rule or PassRule()
        self.inbox: list[Event] = []
        # (at, seq, timer): seq is unique, so timers are never compared
        self._timers: list[tuple[float, int, TimerFired]] = []
        self._seq = 0
        self._last_pass: float | None = None
        tick = self.rule.tick_s
        self._next_tick = None if tick is None or start is None else start + tick
        self.steps = 0
        self.liveness = liveness

    def post(self, *events: Event) -> None:
        """Handled at the next step, in order."""
        self.inbox.extend(events)

    def due(self) -> float | None:
        """The earliest time at which a step has work without a new event: a timer, a pass
        held back by the rule's gap, or the tick (``None``: nothing until an event comes)."""
        t = self._timers[0][0] if self._timers else None
        # with no gap, a change the pass itself left (a throttle window moved) waits for the
        # next event, as it always has: a wake-up at the same instant could repeat forever
        if self.core.dirty and self._last_pass is not None and self.rule.min_gap_s > 0:
            held = self._last_pass + self.rule.min_gap_s
            t = held if t is None else min(t, held)
        if self._next_tick is not None:
            t = self._next_tick if t is None else min(t, self._next_tick)
        if self.liveness is not None and self.rule.tick_s is None:
            # no tick to judge the leases at: the first deadline (on the Clock: no lease_now)
            lease = self.liveness.due()
            if lease is not None:
                t = lease if t is None else min(t, lease)
        return t

    def step(
        self, now: float, events: Iterable[Event] = (), *, lease_now: float | None = None
    ) -> Step:
        """Handle the inbox and ``events`` (each alone: one the core refuses fails alone), at
        the tick the nodes the liveness timers declare lost (at ``lease_now``, on the lease
        clock; default ``now``), the timers due, then a pass if the rule says so; commit, then
        hand the commands on."""
        ticked = self._next_tick is not None and now >= self._next_tick
        judge = ticked or self.rule.tick_s is None  # the leases, at the tick's cadence
        lost = self.expire(now if lease_now is None else lease_now) if judge else []
        # the losses last: a report that came in before them (a task's exit) is the truth
        batch = [*self.inbox, *events, *lost] if lost or self.inbox else list(events)
        self.inbox = []
        while self._timers and self._timers[0][0] <= now:  # after the events, in time order
            batch.append(heapq.heappop(self._timers)[2])
        cmds, refused = self.core.apply_events(now, batch)
        if ticked:
            assert self.rule.tick_s is not None
            self._next_tick = now + self.rule.tick_s
        scheduled = False
        if ticked or self._pass_allowed(now):
            before = self.core.cycle
            cmds += self.core.tick(now) if ticked else self.core.handle(now)
            if self.core.cycle != before:
                self._last_pass, scheduled = now, True
        step = Step(now, self._deliverable(cmds), refused, scheduled, ticked)
        step.lost = [ev.node for ev in lost]
        self.journal.commit(step)  # raises: nothing below happens, the caller rebuilds
        self.steps += 1
        self.executor.apply(step.commands)
        return step

    def expire(self, lease_now: float) -> list[NodeLost]:
        """The liveness timers' decisions at ``lease_now``: a NodeLost for each node the core
        holds up whose grace ran out (a node it does not hold, or holds lost, is only no
        longer watched)."""
        if self.liveness is None:
            return []
        nodes = self.core.nodes
        return [
            ev
            for ev in self.liveness.expired(lease_now)
            if (n := nodes.get(ev.node)) is not None and not n.lost
        ]

    def _pass_allowed(self, now: float) -> bool:
        if not self.core.dirty:
            return False
        return self._last_pass is None or now >= self._last_pass + self.rule.min_gap_s

    def _deliverable(self, cmds: list[Command]) -> list[Command]:
        """Timers stay here; launches go out only as far as they still hold at the step's end
        (a reconcile or a fencing later in the same step may have superseded them)."""
        out: list[Command] = []
        for c in cmds:
            if isinstance(c, SetTimer):
                self._seq += 1
                heapq.heappush(
                    self._timers, (c.at, self._seq, TimerFired(c.kind, c.job_id, c.attempt))
                )
                continue
            if isinstance(c, Launch):
                held = self.core.deliverable(c)
                if held is None:
                    continue
                c = held
            out.append(c)
        return out
