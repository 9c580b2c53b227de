"""Failed nodes the controller does not know about yet (``SimConfig.node_grace_s``).

Live, a node that dies just stops heartbeating; the controller declares it lost when its grace
runs out (``core.liveness``, run by the driver). With a grace set, the simulator does the same:
a node failing at ``t`` goes silent (its last heartbeat at ``t``), the driver's liveness timers
declare it lost at ``t + grace``, and in between the world behaves as a dead node does:

- its ranks neither start nor exit (their reports are dropped), and an attempt with a rank
  there stopped working at ``t`` (or at its launch, if placed there later): its ranks on live
  nodes hang rather than end by themselves, and only the work done up to then counts;
- its GPUs stay held by those attempts until the loss is known: the cost of slow detection;
- a node repaired before its grace runs out rebooted and runs nothing: its jobs are lost when
  it comes back (a NodeLost, then the NodeUp), as a re-registration that lists no tasks is.

Healthy nodes are never renewed: only a silent node is watched, so the timers cost nothing on
a replay of thousands of nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.core.events import NodeLost, TaskExited, TaskStarted
from gpufleet.core.liveness import NodeLiveness
from gpufleet.model.allocation import Allocation


@dataclass(frozen=True, slots=True)
class NodeFails:
    """On the simulator's heap: the node dies now, and nobody is told (with a grace set)."""

    node: str


Attempt = tuple[str, int]  # (job, attempt)


class SilentNodes:
    def __init__(self, grace_s: float) -> None:
        self.liveness = NodeLiveness(grace_s)  # the driver's: it declares the losses
        self._since: dict[str, float] = {}  # silent node -> when it died
        self._placed: dict[str, tuple[int, tuple[str, ...]]] = {}  # job -> attempt, rank nodes
        self._stopped: dict[Attempt, float] = {}  # attempts on a dead node -> since when

    def fails(self, node: str, at: float) -> None:
        """The node dies at ``at``: what runs there stops, and the timers start."""
        if node in self._since:
            return
        self._since[node] = at
        self.liveness.renewed(node, at)
        for job, (attempt, nodes) in self._placed.items():
            if node in nodes:
                self._stopped.setdefault((job, attempt), at)

    def launched(self, job: str, attempt: int, allocation: Allocation, at: float) -> None:
        """Where an attempt's ranks run; one placed on a dead node never works."""
        nodes = tuple(p.node for p in allocation)
        self._placed[job] = (attempt, nodes)
        if any(n in self._since for n in nodes):
            self._stopped[(job, attempt)] = at

    def ended(self, job: str, attempt: int) -> None:
        """The attempt is over for the controller: later reports of it change nothing."""
        placed = self._placed.get(job)
        if placed is not None and placed[0] == attempt:
            del self._placed[job]
        self._stopped.pop((job, attempt), None)

    def stopped_at(self, job: str, attempt: int) -> float | None:
        """When the attempt stopped working on a dead node (None: it did not)."""
        return self._stopped.get((job, attempt))

    def reports(self, ev: TaskStarted | TaskExited) -> bool:
        """Whether the report reaches the controller: none from a dead node's ranks; from a
        live node's rank of an attempt stopped by a dead one, only its kill (exit 0 is its work
        done, which a hung attempt never finishes)."""
        if not self._since:
            return True
        placed = self._placed.get(ev.job_id)
        if placed is None or placed[0] != ev.attempt:
            return True  # stale for the controller as well
        nodes = placed[1]
        if ev.rank < len(nodes) and nodes[ev.rank] in self._since:
            return False
        stopped = (ev.job_id, ev.attempt) in self._stopped
        return not (stopped and isinstance(ev, TaskExited) and ev.exit_code == 0)

    def comes_back(self, node: str, at: float) -> Iterable[NodeLost]:
        """The node is repaired at ``at``: if its loss was not declared yet, it rebooted within
        its grace and runs nothing, so its jobs are lost now (a NodeLost to hand the core
        before the NodeUp)."""
        since = self._since.pop(node, None)
        if since is None or self.liveness.renewed_at(node) is None:
            return ()
        self.liveness.forget(node)
        why = f"rebooted {at - since:g} s after it died, within its grace: it runs no task"
        return (NodeLost(node, why),)
