"""Rolling maintenance (``gpufleet maintain``) as a pure state machine: events in, actions out,
the time given with each event (no clock of its own). The controller service
(server/service/maintenance.py) persists the rollout after every step and only then carries out
its actions (commit before command), and feeds back what it observes.

A rollout takes its nodes in batches (a canary batch first, when asked): each node of a batch is
drained, and once it runs nothing (or at the deadline, its jobs requeued) the operator's command
runs on it through its agent, then the validation layers; a node that passes returns to service.
A node that fails stays drained with the reason and gets the rollback command. A batch whose
failures take the rollout past ``max_failures`` stops it: no further batch starts. After the
canary batch the rollout waits for a confirmation or a soak time. Bound to a window (a
reservation), batches start only while it is open.

An agent upgrade restarts each node's agent instead (tasks keep running: nothing is drained).

Node commands get ids made from the rollout's id, the node's index and the step, so a step
carried out again after a controller restart (``Resumed``) starts no second command: the node
command service answers the existing one."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

# a node's phases, in order; the last three are ends
PENDING, DRAINING, RUNNING, RESTARTING, VALIDATING = (
    "pending",
    "draining",
    "running",
    "restarting",
    "validating",
)
ROLLING_BACK, DONE, FAILED, ROLLED_BACK = "rolling back", "done", "failed", "rolled back"
NODE_ENDS = (DONE, FAILED, ROLLED_BACK)
# the rollout's states; the last three are ends
WAITING, ACTIVE, CONFIRM, SOAKING = (
    "waiting for window",
    "running",
    "awaiting confirmation",
    "soaking",
)
SUCCEEDED, STOPPED, CANCELLED = "done", "failed", "cancelled"
ENDS = (SUCCEEDED, STOPPED, CANCELLED)


@dataclass(frozen=True)
class RolloutSpec:
    id: str
    nodes: tuple[str, ...]
    batch: int  # nodes per batch (after the canary)
    run: str = ""  # the operator's command ("" with agent_upgrade)
    rollback: str = ""
    validate: tuple[str, ...] = ()  # gpufleet validate's layers, run on each node
    max_failures: int = 0  # failed nodes the rollout tolerates before it stops
    deadline_s: float | None = None  # a node's drain: its jobs requeued past this
    canary: int = 0  # nodes in the first batch (0: no canary)
    soak_s: float | None = None  # after the canary: wait this long (None: a confirmation)
    window: tuple[float, float] | None = None  # (start, end): batches start only inside
    window_name: str = ""
    agent_upgrade: bool = False
    python: str = ""  # agent upgrade: the new install's interpreter ("" the agent's own)
    timeout_s: float = 3600.0  # each command's bound
    created_by: str = ""

    def batches(self) -> list[tuple[str, ...]]:
        nodes, out = list(self.nodes), []
        if self.canary:
            out.append(tuple(nodes[: self.canary]))
            nodes = nodes[self.canary :]
        size = max(1, self.batch)
        out += [tuple(nodes[i : i + size]) for i in range(0, len(nodes), size)]
        return out


# ----- events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """Created (or, ``Resumed``, read back from the store by a new controller)."""


@dataclass(frozen=True)
class Resumed:
    """A controller took the rollout over: every step under way is carried out again."""


@dataclass(frozen=True)
class Tick:
    """Time passed: windows, deadlines, soak."""


@dataclass(frozen=True)
class NodeIdle:
    node: str  # runs no job now


@dataclass(frozen=True)
class CommandEnded:
    node: str
    step: str  # "run", "restart", "validate", "rollback"
    ok: bool
    why: str = ""


@dataclass(frozen=True)
class Confirmed:
    by: str = ""


@dataclass(frozen=True)
class Cancel:
    by: str = ""


Event = Started | Resumed | Tick | NodeIdle | CommandEnded | Confirmed | Cancel


# ----- actions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Drain:
    node: str
    why: str


@dataclass(frozen=True)
class Requeue:
    node: str
    why: str


@dataclass(frozen=True)
class RunCommand:
    node: str
    id: str  # the node command's id: the same each time this step is carried out
    kind: str  # "exec", "validate", "restart"
    command: str
    step: str
    timeout_s: float


@dataclass(frozen=True)
class Resume:
    node: str
    why: str


@dataclass(frozen=True)
class Record:
    """A line in the node's history (node "" : the rollout's own) and the audit log."""

    node: str
    what: str
    why: str


Action = Drain | Requeue | RunCommand | Resume | Record


@dataclass
class NodeState:
    phase: str = PENDING
    since: float = 0.0  # when this phase began
    why: str = ""  # a failure's reason
    requeued: bool = False


@dataclass
class Rollout:
    spec: RolloutSpec
    state: str = ACTIVE
    batch: int = -1  # the batch under way (or last done); -1: none started
    nodes: dict[str, NodeState] = field(default_factory=dict)
    soak_until: float | None = None
    why: str = ""
    started: float = 0.0
    ended: float | None = None

    def __post_init__(self) -> None:
        for n in self.spec.nodes:
            self.nodes.setdefault(n, NodeState())

    @property
    def failures(self) -> int:
        return sum(1 for s in self.nodes.values() if s.phase in (FAILED, ROLLED_BACK, ROLLING_BACK))

    def current(self) -> tuple[str, ...]:
        batches = self.spec.batches()
        return batches[self.batch] if 0 <= self.batch < len(batches) else ()

    # ----- the machine ---------------------------------------------------------------------

    def handle(self, ev: Event, now: float) -> list[Action]:
        out: list[Action] = []
        if isinstance(ev, Cancel):
            if self.state not in ENDS:
                self._end(CANCELLED, f"cancelled by {ev.by or 'an admin'}", now, out)
            return out
        if self.state in ENDS:
            return out
        if isinstance(ev, Started):
            self.started = now
            self.state = WAITING if self.spec.window else ACTIVE
            out.append(Record("", "maintenance", self._summary()))
        elif isinstance(ev, Resumed):
            out += self._redo(now)
        elif isinstance(ev, NodeIdle):
            self._idle(ev.node, now, out)
        elif isinstance(ev, CommandEnded):
            self._ended(ev, now, out)
        elif isinstance(ev, Confirmed) and self.state == CONFIRM:
            out.append(Record("", "maintenance", f"canary confirmed by {ev.by or 'an admin'}"))
            self.state = ACTIVE
        self._advance(now, out)
        return out

    def _summary(self) -> str:
        s = self.spec
        what = "agent upgrade" if s.agent_upgrade else f"run {s.run!r}"
        n = len(self.spec.batches())
        return f"{s.id}: {what} on {len(s.nodes)} nodes in {n} batches"

    def _advance(self, now: float, out: list[Action]) -> None:
        """Deadlines, then the next batch when the one under way has settled."""
        self._deadlines(now, out)
        if self.state == WAITING:
            if self.spec.window is not None and now < self.spec.window[0]:
                return
            self.state = ACTIVE
        if self.state == SOAKING and self.soak_until is not None and now >= self.soak_until:
            out.append(Record("", "maintenance", "canary soaked: the rollout goes on"))
            self.state = ACTIVE
        if self.state != ACTIVE or not self._settled():
            return
        if self.batch >= 0 and self.failures > self.spec.max_failures:
            n = self.failures
            self._end(STOPPED, f"{n} node(s) failed (at most {self.spec.max_failures})", now, out)
            return
        if self.batch == 0 and self.spec.canary and self._canary_wait(now, out):
            return
        if self.batch + 1 >= len(self.spec.batches()):
            failed = f", {self.failures} node(s) failed" if self.failures else ""
            self._end(SUCCEEDED, f"every batch done{failed}", now, out)
            return
        if self.spec.window is not None and now >= self.spec.window[1]:
            self._end(STOPPED, f"the window {self.spec.window_name} closed", now, out)
            return
        self._start_batch(now, out)

    def _canary_wait(self, now: float, out: list[Action]) -> bool:
        """Right after the canary batch: wait once, for a soak or a confirmation."""
        if self.soak_until is not None:
            return False  # waited
        if self.spec.soak_s is not None:
            self.soak_until = now + self.spec.soak_s
            self.state = SOAKING
            out.append(Record("", "maintenance", f"canary passed: soaking {self.spec.soak_s:g} s"))
        else:
            self.soak_until = now
            self.state = CONFIRM
            why = f"canary passed: confirm with 'gpufleet maintain confirm {self.spec.id}'"
            out.append(Record("", "maintenance", why))
        return True

    def _settled(self) -> bool:
        return all(self.nodes[n].phase in NODE_ENDS for n in self.current())

    def _start_batch(self, now: float, out: list[Action]) -> None:
        self.batch += 1
        batches = self.spec.batches()
        label = f"batch {self.batch + 1}/{len(batches)}"
        if self.batch == 0 and self.spec.canary:
            label += " (canary)"
        out.append(Record("", "maintenance", f"{label}: {', '.join(batches[self.batch])}"))
        for node in batches[self.batch]:
            if self.spec.agent_upgrade:
                self._to(node, RESTARTING, now)
                out.append(Record(node, "maintenance", f"{self.spec.id} {label}: agent upgrade"))
                out.append(self._command(node, "restart"))
            else:
                self._to(node, DRAINING, now)
                out.append(Drain(node, f"maintenance {self.spec.id} {label}"))

    def _to(self, node: str, phase: str, now: float, why: str = "") -> None:
        st = self.nodes[node]
        st.phase, st.since = phase, now
        if why:
            st.why = why

    def _command(self, node: str, step: str) -> RunCommand:
        s = self.spec
        cid = f"{s.id}.{s.nodes.index(node)}.{step}"
        if step == "restart":
            return RunCommand(node, cid, "restart", s.python, step, s.timeout_s)
        if step == "validate":
            layers = "--layers " + ",".join(s.validate)
            return RunCommand(node, cid, "validate", layers, step, s.timeout_s)
        return RunCommand(
            node, cid, "exec", s.run if step == "run" else s.rollback, step, s.timeout_s
        )

    def _deadlines(self, now: float, out: list[Action]) -> None:
        d = self.spec.deadline_s
        if d is None:
            return
        for node in self.current():
            st = self.nodes[node]
            if st.phase == DRAINING and not st.requeued and now >= st.since + d:
                st.requeued = True
                why = f"maintenance {self.spec.id}: drain deadline ({d:g} s) reached"
                out.append(Requeue(node, why))
                out.append(Record(node, "maintenance", f"{why}: its jobs requeued"))

    def _idle(self, node: str, now: float, out: list[Action]) -> None:
        st = self.nodes.get(node)
        if st is None or st.phase != DRAINING:
            return
        self._to(node, RUNNING, now)
        out.append(
            Record(node, "maintenance", f"{self.spec.id}: drained; running {self.spec.run!r}")
        )
        out.append(self._command(node, "run"))

    def _ended(self, ev: CommandEnded, now: float, out: list[Action]) -> None:
        st = self.nodes.get(ev.node)
        expected = {RUNNING: "run", RESTARTING: "restart", VALIDATING: "validate"}
        if st is None:
            return
        if st.phase == ROLLING_BACK and ev.step == "rollback":
            said = "rollback done" if ev.ok else f"rollback failed: {ev.why}"
            self._to(ev.node, ROLLED_BACK, now)
            out.append(Record(ev.node, "maintenance", f"{self.spec.id}: {said}"))
            return
        if expected.get(st.phase) != ev.step:
            return  # a repeat, or a step this node is past
        if not ev.ok:
            self._fail(ev.node, f"{ev.step} failed: {ev.why}", now, out)
        elif ev.step != "validate" and self.spec.validate:
            self._to(ev.node, VALIDATING, now)
            out.append(Record(ev.node, "maintenance", f"{self.spec.id}: {ev.step} ok; validating"))
            out.append(self._command(ev.node, "validate"))
        else:
            self._to(ev.node, DONE, now)
            out.append(Record(ev.node, "maintenance", f"{self.spec.id}: {ev.step} ok; done"))
            if not self.spec.agent_upgrade:
                out.append(Resume(ev.node, f"maintenance {self.spec.id} done"))

    def _fail(self, node: str, why: str, now: float, out: list[Action]) -> None:
        reason = f"maintenance {self.spec.id}: {why}"
        out.append(Record(node, "maintenance", reason))
        out.append(Drain(node, reason[:500]))  # stays drained, with the reason
        if self.spec.rollback:
            self._to(node, ROLLING_BACK, now, why)
            out.append(self._command(node, "rollback"))
        else:
            self._to(node, FAILED, now, why)

    def _redo(self, now: float) -> list[Action]:
        """A new controller carries on: what each node was doing, asked for again (each of
        these is idempotent: a drain, a command by its id)."""
        out: list[Action] = [Record("", "maintenance", f"{self.spec.id}: resumed by a controller")]
        label = f"maintenance {self.spec.id}"
        for node in self.current():
            st = self.nodes[node]
            if st.phase == DRAINING:
                out.append(Drain(node, label))
            elif st.phase == RUNNING:
                out.append(self._command(node, "run"))
            elif st.phase in (RESTARTING, VALIDATING):
                out.append(self._command(node, "restart" if st.phase == RESTARTING else "validate"))
            elif st.phase == ROLLING_BACK:
                out.append(self._command(node, "rollback"))
        return out

    def _end(self, state: str, why: str, now: float, out: list[Action]) -> None:
        self.state, self.why, self.ended = state, why, now
        out.append(Record("", "maintenance", f"{self.spec.id} {state}: {why}"))

    # ----- the store's document ------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        spec = {f.name: getattr(self.spec, f.name) for f in fields(self.spec)}
        spec["nodes"], spec["validate"] = list(self.spec.nodes), list(self.spec.validate)
        spec["window"] = list(self.spec.window) if self.spec.window else None
        return {
            "spec": spec,
            "state": self.state,
            "batch": self.batch,
            "nodes": {n: vars(s).copy() for n, s in self.nodes.items()},
            "soak_until": self.soak_until,
            "why": self.why,
            "started": self.started,
            "ended": self.ended,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Rollout:
        spec = dict(d["spec"])
        spec["nodes"], spec["validate"] = tuple(spec["nodes"]), tuple(spec["validate"])
        spec["window"] = tuple(spec["window"]) if spec.get("window") else None
        r = cls(RolloutSpec(**spec))
        r.state, r.batch, r.why = d["state"], int(d["batch"]), d.get("why", "")
        r.nodes = {n: NodeState(**s) for n, s in d["nodes"].items()}
        r.soak_until, r.started, r.ended = d.get("soak_until"), d["started"], d.get("ended")
        return r
