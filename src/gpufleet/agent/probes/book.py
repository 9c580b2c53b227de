"""What the agent knows of its replicas' probes, without I/O: a probe's description, the pure
state machine of one probe of one replica (``ProbeState``), and the node's book of them
(``Probes``), which says what is due and what a result changes. Time is what the caller passes;
``run`` runs probes for real, ``executor`` in a pool of threads."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpufleet.agent.accounts import Account
from gpufleet.agent.tasks import Key
from gpufleet.model.errors import SpecError
from gpufleet.model.service import Probe

ProbeKind = Literal["readiness", "liveness"]
KINDS: tuple[str, ...] = ("readiness", "liveness")


# ----- the probe's description ---------------------------------------------------------------
# A probe is the service model's ``Probe`` (``model.service``: kind http/tcp/command, path, port,
# thresholds, read and checked by ``Probe.from_dict``), run as a replica's ``readiness`` or
# ``liveness`` probe. There is no ``host`` (Kubernetes' httpGet has one): a probe goes to the
# address the agent gives (its own, where the gateway reaches the replica), so a job cannot
# point the agent's own connections elsewhere.


def probes_of(raw: Mapping[str, Any]) -> list[tuple[ProbeKind, Probe]]:
    """A launch's probes (``{"readiness": Probe.to_dict(), "liveness": ...}``), read by the
    model's own reader; SpecError names every problem."""
    unknown = sorted(set(raw) - set(KINDS))
    if unknown:
        raise SpecError(
            f"unknown probe kind(s) {', '.join(unknown)} (readiness, liveness)",
            source="launch",
            field="probes",
        )
    out: list[tuple[ProbeKind, Probe]] = []
    for kind in ("readiness", "liveness"):
        if raw.get(kind) is not None:
            out.append(
                (kind, Probe.from_dict(raw[kind], kind=kind, source="launch", path="probes"))
            )
    return out


@dataclass(frozen=True)
class ProbeTarget:
    """What the agent knows of the replica a probe runs against: where it listens, and for
    command probes how its task runs (its environment, its account, its private /tmp: what
    ``runner.TaskRunner`` built for it). ``account`` None: the agent's own account."""

    host: str = "127.0.0.1"
    env: Mapping[str, str] = field(default_factory=dict)
    account: Account | None = None
    tmp: Path | None = None
    cwd: str = "/"
    # why command probes cannot run against this replica ("" they can): one in a container
    # needs the runtime's exec, never a command on the node
    refuse_commands: str = ""

    def port_for(self, probe: Probe) -> int | None:
        if probe.port is not None:
            return probe.port
        raw = self.env.get("PORT", "")
        return int(raw) if raw.isdigit() and 0 < int(raw) < 65536 else None


# ----- what is reported -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """What a probe result changed: readiness became ``ok`` (ready) or not, or liveness
    failed (``ok`` False: the replica is dead)."""

    kind: ProbeKind
    ok: bool
    why: str
    at: float


@dataclass(frozen=True, slots=True)
class ReplicaProbe:
    """The record the agent reports to the controller: a replica's readiness changed, or its
    liveness probe declared it dead."""

    job_id: str
    attempt: int
    kind: ProbeKind
    ok: bool
    why: str
    rank: int = 0  # which task of the job: a replica is one task

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "rank": self.rank,
            "kind": self.kind,
            "ok": self.ok,
            "why": self.why,
        }


# ----- the state machine ---------------------------------------------------------------------


class ProbeState:
    """One probe of one replica. Pure: time is what the caller passes."""

    def __init__(self, kind: ProbeKind, probe: Probe, started_at: float) -> None:
        self.kind = kind
        self.probe = probe
        self._due_at = started_at + probe.initial_delay_s
        self.in_flight = False
        self.successes = 0  # consecutive
        self.failures = 0  # consecutive
        # readiness: None until decided (unready), then True/False; liveness: True until dead
        self.ready: bool | None = None if kind == "readiness" else True
        self.dead = False
        self.last_why = ""

    def next_due(self, now: float) -> float | None:
        """When the next probe is due (``now`` at the earliest: due at once); None while one
        is in flight, or once liveness declared the replica dead (no more probes)."""
        if self.in_flight or self.dead:
            return None
        return max(self._due_at, now)

    def is_due(self, now: float) -> bool:
        return not self.in_flight and not self.dead and now >= self._due_at

    def on_sent(self, now: float) -> None:
        """The probe went out at ``now``: the next one is due a period after its start."""
        self.in_flight = True
        self._due_at = now + self.probe.period_s

    def on_result(self, ok: bool, now: float, why: str) -> Transition | None:
        """A probe's result (``now``: when it came back); the transition it causes, if any."""
        self.in_flight = False
        if self.dead:
            return None
        self.last_why = why
        if ok:
            self.successes, self.failures = self.successes + 1, 0
        else:
            self.successes, self.failures = 0, self.failures + 1
        s = self.probe
        if self.kind == "liveness":
            if not ok and self.failures >= s.failure_threshold:
                self.dead = True
                self.ready = False
                return Transition(
                    "liveness",
                    False,
                    f"liveness probe failed {_times(self.failures)} in a row: {why}",
                    now,
                )
            return None
        if ok and self.successes >= s.success_threshold and self.ready is not True:
            self.ready = True
            return Transition("readiness", True, f"ready: {why}", now)
        if not ok and self.failures >= s.failure_threshold and self.ready is not False:
            self.ready = False
            return Transition(
                "readiness", False, f"not ready: {self.failures} failures in a row: {why}", now
            )
        return None


# ----- the node's book ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Due:
    """A probe to run now: what ``Probes.due`` hands to the executor."""

    key: Key
    kind: ProbeKind
    probe: Probe
    target: ProbeTarget
    token: int  # which run: a result for a forgotten replica, or an older run, is dropped


@dataclass(frozen=True, slots=True)
class ProbeResult:
    key: Key
    kind: ProbeKind
    token: int
    ok: bool
    why: str
    at: float  # when it came back, on the executor's clock


class Probes:
    """The probes of every replica on the node (pure: no threads, no I/O)."""

    def __init__(self) -> None:
        self._states: dict[tuple[Key, str], ProbeState] = {}
        self._targets: dict[Key, ProbeTarget] = {}
        self._tokens: dict[tuple[Key, str], int] = {}
        self._seq = itertools.count(1)

    def add(
        self,
        key: Key,
        probes: Iterable[tuple[ProbeKind, Probe]],
        target: ProbeTarget,
        started_at: float,
    ) -> None:
        """A replica started at ``started_at`` (a redelivered add changes nothing)."""
        if key in self._targets:
            return
        probes = list(probes)
        kinds = [k for k, _ in probes]
        if len(set(kinds)) != len(kinds) or not set(kinds) <= set(KINDS):
            raise ValueError(f"one readiness and one liveness probe at most for {key}: {kinds}")
        self._targets[key] = target
        for kind, probe in probes:
            self._states[(key, kind)] = ProbeState(kind, probe, started_at)

    def __contains__(self, key: Key) -> bool:
        return key in self._targets

    def __len__(self) -> int:
        return len(self._targets)

    def remove(self, key: Key) -> None:
        """The replica exited (or was killed): its probes stop; a result still in flight is
        dropped when it comes."""
        self._targets.pop(key, None)
        for kind in KINDS:
            self._states.pop((key, kind), None)
            self._tokens.pop((key, kind), None)

    def state(self, key: Key, kind: str) -> ProbeState | None:
        return self._states.get((key, kind))

    def next_due(self, now: float) -> float | None:
        """The earliest time any probe is due (for a loop that sleeps until then)."""
        times = [t for s in self._states.values() if (t := s.next_due(now)) is not None]
        return min(times, default=None)

    def due(self, now: float) -> list[Due]:
        """The probes to run now, each marked in flight."""
        out = []
        for (key, kind), st in self._states.items():
            if st.is_due(now):
                st.on_sent(now)
                token = next(self._seq)
                self._tokens[(key, kind)] = token
                out.append(Due(key, st.kind, st.probe, self._targets[key], token))
        return out

    def results(self, results: Iterable[ProbeResult]) -> list[ReplicaProbe]:
        """Results that came back, in order; the transitions to report to the controller."""
        out = []
        for r in results:
            if self._tokens.get((r.key, r.kind)) != r.token:
                continue  # the replica is gone, or this is not its newest run
            del self._tokens[(r.key, r.kind)]
            t = self._states[(r.key, r.kind)].on_result(r.ok, r.at, r.why)
            if t is not None:
                job, attempt, rank = r.key
                out.append(ReplicaProbe(job, attempt, t.kind, t.ok, t.why, rank))
        return out


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"
