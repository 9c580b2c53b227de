"""The agent's decisions, without I/O: events in, actions out (Dask's worker state machine).

The threads of ``Agent`` only carry messages: a command from the long-poll, a task's exit from
the runner, a heartbeat's answer or failure, the time. This class decides what follows —
launch, kill, report, register again — so the lease and fencing rules are tested with a number
for the time and no threads.

The lease: every heartbeat the controller answers extends it to ``sent_at + lease_s`` (the send
time, not the answer's, since the controller counted from when it heard us). Two deadlines
follow from that last contact (ADR 0031): past the lease the agent is *lapsed*: it launches
nothing (the controller may be away, or may be placing our jobs elsewhere) and its tasks run on;
past the outage tolerance (at least the lease) it is *fenced*: it stops every task, because by
the controller's node grace their jobs may run elsewhere. A heartbeat that goes through again
ends both; a task fenced stays stopped.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.agent.probes.book import ProbeKind, ReplicaProbe, probes_of
from gpufleet.agent.tasks import EXIT_REFUSED, FENCED, Key, LatestAttempts, RunnerEvent
from gpufleet.api.schemas import AgentCommand, AgentEvent, HeartbeatResult, TaskRef
from gpufleet.model.errors import SpecError
from gpufleet.model.notice import StopNotice
from gpufleet.model.service import Probe

Phase = Literal["launching", "running", "stopping"]
_WHY_MAX = 1000  # a probe's reason is short already; bounded all the same
_REREGISTER_STATUS = (404, 409, 410)  # the controller does not know us (or declared us lost)


@dataclass(frozen=True, slots=True)
class Launch:
    cmd: AgentCommand


@dataclass(frozen=True, slots=True)
class Kill:
    key: Key
    grace_s: float
    why: str
    notice: StopNotice | None = None  # a preemption's: its signal, then the wait for it


@dataclass(frozen=True, slots=True)
class Signal:
    """A signal to a running task that does not stop it (ADR 0078): ``scope`` says to whom."""

    key: Key
    signal: int
    scope: str


@dataclass(frozen=True, slots=True)
class Send:
    event: AgentEvent


@dataclass(frozen=True, slots=True)
class Register:
    why: str


@dataclass(frozen=True, slots=True)
class StartProbes:
    """A service replica runs: probe it (the first probe after its initial delay)."""

    key: Key
    probes: tuple[tuple[ProbeKind, Probe], ...]


@dataclass(frozen=True, slots=True)
class StopProbes:
    key: Key


Action = Launch | Kill | Signal | Send | Register | StartProbes | StopProbes


def _exited(key: Key, why: str, code: int = EXIT_REFUSED, *, fenced: bool = False) -> Send:
    job, attempt, rank = key
    return Send(
        AgentEvent(
            kind="exited",
            job=job,
            attempt=attempt,
            rank=rank,
            exit_code=code,
            why=why,
            cause="fenced" if fenced else "",
        )
    )


ENDED_SENT = 1_000  # the most exits a registration repeats (``AgentState.ended``)


class AgentState:
    def __init__(
        self,
        *,
        fence_grace_s: float = 2.0,
        outage_tolerance_s: float = 0.0,
        remember: int = 10_000,
    ) -> None:
        self.fence_grace_s = fence_grace_s  # short: the tasks must be gone before the node is
        # how long without contact the tasks run on (the controller's, at registration; 0:
        # fenced at the lease, as an older controller expects)
        self.outage_tolerance_s = outage_tolerance_s
        self.lease_until = -math.inf  # nothing to fence before the first registration
        self.fence_until = -math.inf  # past it the tasks are stopped (the watchdog's deadline)
        self.last_contact: float | None = None
        self.registered = False
        self.lapsed = False  # past the lease: launches refused, tasks running
        self.fenced = False  # past the tolerance: tasks stopped
        self.tasks: dict[Key, Phase] = {}
        # a service replica's probes, from its launch until it ends (started once it runs)
        self._probes: dict[Key, tuple[tuple[ProbeKind, Probe], ...]] = {}
        self._latest = LatestAttempts()  # job → newest attempt accepted
        # recent finished keys (dedup), with the exit of each that ran here (``ended``)
        self._done: OrderedDict[Key, AgentEvent | None] = OrderedDict()
        self._remember = remember

    # ----- queries ------------------------------------------------------------------------

    def running(self) -> list[TaskRef]:
        return [TaskRef(job=j, attempt=a, rank=r) for j, a, r in sorted(self.tasks)]

    def ended(self, most: int = ENDED_SENT) -> list[AgentEvent]:
        """The latest exits of tasks that ran here, reported or not (oldest first): sent with
        each registration, so that a controller whose store predates them (restored from a
        backup) learns that they ended instead of taking them for lost and running them again."""
        out: list[AgentEvent] = []
        for ev in reversed(self._done.values()):
            if ev is not None:
                out.append(ev)
                if len(out) == most:
                    break
        return out[::-1]

    # ----- contact with the controller ----------------------------------------------------

    def on_registered(self, lease_s: float, sent_at: float) -> list[Action]:
        self.registered = True
        return self._renew(lease_s, sent_at)

    def on_heartbeat_ok(self, result: HeartbeatResult, sent_at: float) -> list[Action]:
        out = self._renew(result.lease_s, sent_at)
        for ref in result.stale:
            key = (ref.job, ref.attempt, ref.rank)
            if self.tasks.get(key) in ("launching", "running"):
                self.tasks[key] = "stopping"
                why = f"stale: the controller no longer runs attempt {ref.attempt} here"
                out.append(Kill(key, self.fence_grace_s, why))
        return out

    def on_heartbeat_failed(self, t: float, status: int | None = None) -> list[Action]:
        out = self.on_tick(t)
        if status in _REREGISTER_STATUS:
            self.registered = False
            out.append(Register(f"the controller refused the heartbeat ({status})"))
        return out

    def _renew(self, lease_s: float, sent_at: float) -> list[Action]:
        self.lease_until = max(self.lease_until, sent_at + lease_s)
        kept = max(lease_s, self.outage_tolerance_s)
        self.fence_until = max(self.fence_until, sent_at + kept)
        self.last_contact = max(self.last_contact or sent_at, sent_at)
        self.lapsed = self.fenced = False
        return []

    def on_tick(self, t: float) -> list[Action]:
        if t >= self.lease_until:
            self.lapsed = True  # launches are refused from now on; nothing else changes
        if self.fenced or t < self.fence_until:
            return []
        self.fenced = True
        since = f" for {t - self.last_contact:.1f} s" if self.last_contact is not None else ""
        limit = "lease" if self.fence_until <= self.lease_until else "outage tolerance"
        why = f"{FENCED} no contact with the controller{since} ({limit} expired)"
        out: list[Action] = []
        for key, phase in sorted(self.tasks.items()):
            if phase != "stopping":
                self.tasks[key] = "stopping"
            out.append(Kill(key, self.fence_grace_s, why))
        return out

    def adopt(self, tasks: dict[Key, dict[str, Any]], fence_until: float) -> list[Action]:
        """Tasks a previous agent left running (each with its launch's probes), ours now
        (before the first registration, which lists them): they run on until ``fence_until``,
        the deadline that agent published (the controller's node grace counts from its last
        contact), unless we register first. A replica's probes start again."""
        out: list[Action] = []
        for key, raw in sorted(tasks.items()):
            self.tasks[key] = "running"
            self._latest.put(key[0], key[1])
            try:
                probes = tuple(probes_of(raw))
            except SpecError:
                probes = ()  # they were checked at its launch: an older agent's, perhaps
            if probes:
                self._probes[key] = probes
                out.append(StartProbes(key, probes))
        if tasks:
            self.fence_until = max(self.fence_until, fence_until)
        return out

    # ----- commands -----------------------------------------------------------------------

    def on_command(self, cmd: AgentCommand, t: float) -> list[Action]:
        if cmd.kind == "launch":
            return self._launch(cmd, t)
        if cmd.kind == "signal":  # to a task that runs; one stopping or gone hears nothing
            key = (cmd.job, cmd.attempt, cmd.rank)
            running = self.tasks.get(key) == "running"
            return [Signal(key, cmd.signal, cmd.signal_scope)] if running else []
        return self._kill(cmd)

    def _launch(self, cmd: AgentCommand, t: float) -> list[Action]:
        key: Key = (cmd.job, cmd.attempt, cmd.rank)
        if key in self.tasks or key in self._done:
            return []  # a redelivered command: it ran, or runs, once
        if self.fenced or t >= self.lease_until:
            self._forget(key)
            why = "refused: the agent's lease has expired; it launches nothing"
            return [_exited(key, why, fenced=True)]
        latest = self._latest.get(cmd.job)
        if latest is not None and cmd.attempt < latest:
            self._forget(key)
            return [
                _exited(key, f"refused: stale attempt {cmd.attempt} (attempt {latest} is newer)")
            ]
        try:
            probes = tuple(probes_of(cmd.probes))
        except SpecError as e:  # the controller checked them: a launch from elsewhere
            self._forget(key)
            return [_exited(key, f"refused: the launch's probes: {e}")]
        out: list[Action] = []
        if latest is not None and cmd.attempt > latest:
            for k, phase in sorted(self.tasks.items()):
                if k[0] == cmd.job and k[1] < cmd.attempt and phase != "stopping":
                    self.tasks[k] = "stopping"
                    out.append(Kill(k, cmd.grace_s, f"superseded by attempt {cmd.attempt}"))
        self._latest.put(cmd.job, cmd.attempt)
        self.tasks[key] = "launching"
        if probes:
            self._probes[key] = probes
        out.append(Launch(cmd))
        return out

    def _kill(self, cmd: AgentCommand) -> list[Action]:
        why = cmd.why or "killed by the controller"
        notice = (
            StopNotice(cmd.notice_signal, cmd.notice_wait_s, cmd.notice_batch_only)
            if cmd.notice_signal
            else None
        )
        if cmd.rank < 0:  # every rank of that attempt on this node
            keys = [k for k in self.tasks if k[0] == cmd.job and k[1] == cmd.attempt]
        else:
            keys = [(cmd.job, cmd.attempt, cmd.rank)]
        out: list[Action] = []
        for key in sorted(keys):
            phase = self.tasks.get(key)
            if phase is None:
                if key not in self._done:  # never launched: make sure it never will be
                    self._forget(key)
                    out.append(_exited(key, f"{why}; it was not running here"))
                continue
            self.tasks[key] = "stopping"
            out.append(Kill(key, cmd.grace_s, why, notice))
        return out

    # ----- tasks --------------------------------------------------------------------------

    def on_task(self, ev: RunnerEvent) -> list[Action]:
        if ev.kind in ("checkpoint", "metrics"):  # while the task is ours (it may be stopping)
            ours = ev.key in self.tasks or (ev.kind == "metrics" and ev.key in self._done)
            return [Send(ev.wire())] if ours else []  # an ended task's metrics: sent again
        if ev.kind == "started":
            out: list[Action] = [Send(ev.wire())]
            if self.tasks.get(ev.key) == "launching":
                self.tasks[ev.key] = "running"
                probes = self._probes.get(ev.key)
                if probes:
                    out.append(StartProbes(ev.key, probes))
            return out
        self.tasks.pop(ev.key, None)
        self._forget(ev.key, ev.wire())
        if self._probes.pop(ev.key, None) is not None:
            return [StopProbes(ev.key), Send(ev.wire())]
        return [Send(ev.wire())]

    def on_probes(self, records: list[ReplicaProbe]) -> list[Action]:
        """Verdict changes of the probe runner: each reported, for a task that still runs
        (one being stopped or gone changes nothing the controller wants to hear)."""
        out: list[Action] = []
        for r in records:
            if self.tasks.get((r.job_id, r.attempt, r.rank)) != "running":
                continue
            out.append(
                Send(
                    AgentEvent(
                        kind="probe",
                        job=r.job_id,
                        attempt=r.attempt,
                        rank=r.rank,
                        probe=r.kind,
                        ok=r.ok,
                        why=r.why[:_WHY_MAX],
                    )
                )
            )
        return out

    def _forget(self, key: Key, exit: AgentEvent | None = None) -> None:
        self._done[key] = exit
        while len(self._done) > self._remember:
            self._done.popitem(last=False)
