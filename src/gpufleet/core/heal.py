"""The heal loop's state machine: a node drained for a GPU fault is remediated, burnt in, and
returns to service only when the burn-in passes; one that fails ``max_failures`` times within
``window_s`` is left drained as suspected hardware (ADR 0042).

Pure: each method is an event (time passed in), its answer the actions it causes. The
controller turns them into the node's drain and resume, its history and the orders for its
agent (``core/healing.py``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.model.heal import HealPolicy

WAITING = "waiting"  # drained for a fault; a round starts once the node runs nothing
REMEDIATING = "remediating"
BURNING_IN = "burning in"
RMA = "rma"  # given up: drained until an admin resumes it
REMEDIATE, BURN_IN = "remediate", "burn-in"
# the loop's steps in the node's history (NodeEvent.what), besides its drain and its resume
HEAL_STEPS = (REMEDIATING, BURNING_IN, "heal failed", "healed", RMA)

# what each remedy is called in the node's history
REMEDY_NAMES = {"reset": "GPU reset", "command": "the site's command", "none": "no remedy"}


@dataclass(frozen=True, slots=True)
class HealStep:
    """An order for the node's agent: remediate or burn in (``peer``: a healthy node for the
    network layer, "" for none). Unanswered by ``deadline``, the step has failed."""

    node: str
    round: int
    step: str  # REMEDIATE or BURN_IN
    deadline: float
    peer: str = ""


@dataclass(frozen=True, slots=True)
class HealNote:
    """A step of the loop for the node's history and the audit log; ``why`` is also the node's
    reason while it is out of service."""

    node: str
    what: str  # "remediating", "burning in", "heal failed", "healed", "rma"
    why: str


@dataclass(frozen=True, slots=True)
class HealOver:
    """The loop is over for the node: back in service (``ok``), or left drained (RMA)."""

    node: str
    ok: bool
    why: str


HealAction = HealStep | HealNote | HealOver


@dataclass(slots=True)
class _Node:
    phase: str = ""  # "" (in service, or not the loop's), WAITING, REMEDIATING, BURNING_IN, RMA
    round: int = 0  # rounds started: a report of an older one is stale
    failures: list[tuple[float, str]] = field(default_factory=list)  # (time, cause)
    heard: bool = True  # False after a restore until the node's agent is back


class HealBook:
    def __init__(self, policy: HealPolicy) -> None:
        self.policy = policy
        self._nodes: dict[str, _Node] = {}

    # ----- reading ------------------------------------------------------------------------

    def phase(self, node: str) -> str:
        n = self._nodes.get(node)
        return n.phase if n is not None else ""

    def healing(self, node: str) -> bool:
        """The loop holds the node out of service (a round, waiting for one, or RMA)."""
        return self.phase(node) != ""

    def waiting(self) -> list[str]:
        """Nodes whose next round may start once they run nothing (their agents heard)."""
        return sorted(k for k, n in self._nodes.items() if n.phase == WAITING and n.heard)

    def failures(self, node: str) -> list[tuple[float, str]]:
        n = self._nodes.get(node)
        return list(n.failures) if n is not None else []

    # ----- events -------------------------------------------------------------------------

    def fault(self, node: str, why: str, now: float) -> list[HealAction]:
        """A GPU fault drained the node. One seen while the loop holds it already (a burn-in
        that hits it again) is that round's to report, not a failure of its own."""
        n = self._nodes.setdefault(node, _Node())
        if n.phase:
            return []
        n.phase = WAITING
        return self._failed(node, n, now, cause_of(why), "")

    def ready(self, node: str, now: float, peer: str = "") -> list[HealAction]:
        """The node is waiting, its agent is up and it runs nothing: the next round starts."""
        n = self._nodes.get(node)
        if n is None or n.phase != WAITING or not n.heard:
            return []
        n.round += 1
        if self.policy.remedy == "none":
            return self._burn_in(node, n, now, peer, "no remedy")
        n.phase = REMEDIATING
        what = REMEDY_NAMES[self.policy.remedy]
        return [
            HealNote(node, REMEDIATING, f"remediating: {what} (round {n.round})"),
            HealStep(node, n.round, REMEDIATE, now + self.policy.step_timeout_s, peer),
        ]

    def report(
        self, node: str, round_: int, step: str, ok: bool, detail: str, now: float, peer: str = ""
    ) -> list[HealAction]:
        """The agent's answer to a step; one for another round or step is stale: ignored."""
        n = self._nodes.get(node)
        expected = REMEDIATE if n is not None and n.phase == REMEDIATING else BURN_IN
        if n is None or round_ != n.round or step != expected:
            return []
        if n.phase not in (REMEDIATING, BURNING_IN):
            return []
        if not ok:
            what = "remediation" if step == REMEDIATE else "burn-in"
            n.phase = WAITING
            return self._failed(node, n, now, cause_of(detail, what), f"{what} failed: {detail}")
        if step == REMEDIATE:
            return self._burn_in(node, n, now, peer, detail)
        n.phase = ""
        why = f"passed its burn-in (round {n.round})" + (f": {detail}" if detail else "")
        return [HealNote(node, "healed", why), HealOver(node, True, why)]

    def timed_out(self, node: str, round_: int, now: float) -> list[HealAction]:
        """A step's deadline (the timer the step set): unanswered, it has failed."""
        n = self._nodes.get(node)
        if n is None or round_ != n.round or n.phase not in (REMEDIATING, BURNING_IN):
            return []
        what = "remediation" if n.phase == REMEDIATING else "burn-in"
        n.phase = WAITING
        why = f"{what} failed: no answer within {self.policy.step_timeout_s:g} s"
        return self._failed(node, n, now, f"{what} timed out", why)

    def interrupted(self, node: str) -> None:
        """The node was lost mid-round: that round is void (its answer, should one come, is
        stale); the next starts when the node is back and idle."""
        n = self._nodes.get(node)
        if n is not None and n.phase in (REMEDIATING, BURNING_IN):
            n.phase = WAITING
            n.round += 1

    def heard(self, node: str) -> None:
        n = self._nodes.get(node)
        if n is not None:
            n.heard = True

    def cleared(self, node: str, *, resumed: bool) -> None:
        """An admin's drain or resume replaces the loop. A resume of a node given up (its
        part replaced) forgets its failures too; one mid-loop keeps them: they happened."""
        n = self._nodes.get(node)
        if n is None:
            return
        if resumed and n.phase == RMA:
            n.failures.clear()
        n.phase = ""
        n.round += 1

    def restore(
        self, node: str, phase: str, failures: list[tuple[float, str]], round_: int = 0
    ) -> None:
        """After a controller restart, from the node's history: a round in flight is void
        (an answer to it is stale: the next round's number is higher), so the node waits for
        its next one, which starts once its agent registers again."""
        self._nodes[node] = _Node(
            phase=WAITING if phase in (REMEDIATING, BURNING_IN) else phase,
            round=round_,
            failures=list(failures),
            heard=False,
        )

    # ----- the steps ----------------------------------------------------------------------

    def _burn_in(self, node: str, n: _Node, now: float, peer: str, done: str) -> list[HealAction]:
        n.phase = BURNING_IN
        layers = "device" + (f", network with {peer}" if peer and self.policy.network else "")
        why = f"burning in: {layers}, {self.policy.burn_in_s:g} s of stress (round {n.round})"
        if done:
            why += f"; after {done}"
        return [
            HealNote(node, BURNING_IN, why),
            HealStep(node, n.round, BURN_IN, now + self.policy.step_timeout_s, peer),
        ]

    def _failed(self, node: str, n: _Node, now: float, cause: str, why: str) -> list[HealAction]:
        """Count a failure; at ``max_failures`` within the window the node is given up."""
        p = self.policy
        n.failures = [(t, c) for t, c in n.failures if t > now - p.window_s]
        n.failures.append((now, cause))
        out: list[HealAction] = []
        if why:  # a round's failure (the fault that began the loop is in history as its drain)
            out.append(HealNote(node, "heal failed", why))
        if len(n.failures) >= p.max_failures:
            n.phase = RMA
            verdict = rma_reason([c for _, c in n.failures], p.window_s)
            out += [HealNote(node, RMA, verdict), HealOver(node, False, verdict)]
        return out


def from_history(
    events: Iterable[tuple[float, str, str]], drain_prefix: str
) -> tuple[str, list[tuple[float, str]], int]:
    """Where the loop was with a node, its failures and its last round, from the node's
    history (``(time, what, why)``, oldest first), for ``HealBook.restore`` after a controller
    restart. A drain for a failed check (``drain_prefix``) counts as a fault when its reason is
    a GPU's."""
    phase, failures, last = "", [], 0
    for t, what, why in events:
        if (m := _ROUND.search(why)) is not None and what in (REMEDIATING, BURNING_IN):
            last = max(last, int(m.group(1)))
        if what == "drained" and why.startswith(drain_prefix):
            if not phase and cause_of(why) != "fault failed":
                phase = WAITING
                failures.append((t, cause_of(why)))
        elif what in (REMEDIATING, BURNING_IN, RMA):
            phase = what
        elif what == "heal failed":
            phase = WAITING
            failures.append((t, cause_of(why, why.split(" failed", 1)[0])))
        elif what in ("healed", "drained", "resumed"):  # an admin's, or the loop's own resume
            if what == "resumed" and phase == RMA:
                failures = []
            phase = ""
    return phase, failures, last


def net_seconds(burn_in_s: float) -> float:
    """How long each half of the burn-in's network test sends: 1–2 s, within the burn-in."""
    return min(2.0, max(1.0, burn_in_s / 2))


# ----- words ---------------------------------------------------------------------------------

_XID = re.compile(r"\bXID (\d+)")
_ROUND = re.compile(r"\(round (\d+)\)")
_CAUSES = (  # (what a check's reason says, the cause it is counted as), first match wins
    ("double-bit ECC", "double-bit ECC errors"),
    ("missing", "GPU missing"),
    ("expected GPUs", "GPU missing"),
    ("°C over", "overheating"),
    ("NVLink", "NVLink down"),
)


def cause_of(why: str, what: str = "fault") -> str:
    """The short cause a reason counts as: ``XID 79``, ``double-bit ECC errors``, …; else
    ``burn-in failed`` (``what`` failed)."""
    m = _XID.search(why)
    if m is not None:
        return f"XID {m.group(1)}"
    for text, cause in _CAUSES:
        if text in why:
            return cause
    return f"{what} failed"


def span(seconds: float) -> str:
    """A window in words: ``24 h``, ``90 min``, ``45 s``."""
    if seconds >= 2 * 86_400 and seconds % 86_400 == 0:
        return f"{seconds / 86_400:g} d"
    for unit, size in (("h", 3600.0), ("min", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def rma_reason(causes: list[str], window_s: float) -> str:
    """``3 XID 79 in 24 h: suspected hardware — RMA``; mixed causes are listed by count."""
    counts = Counter(causes)
    if len(counts) == 1:
        what = f"{len(causes)} {causes[0]}"
    else:
        parts = ", ".join(f"{k} {c}" for c, k in counts.most_common())
        what = f"{len(causes)} failures ({parts})"
    return f"{what} in {span(window_s)}: suspected hardware — RMA"
