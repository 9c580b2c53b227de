"""The heal loop in the controller: the book's actions (``core/heal.py``) made into the node's
drain and resume, its history (``NodeEvent``), the orders for its agent (``HealOrder``) and
their deadlines (timers). Without a policy it does nothing, and a node drained for a failed
check returns as soon as its checks pass (``core/nodes.py``)."""

from __future__ import annotations

from gpufleet.core.cluster_state import ClusterState
from gpufleet.core.commands import Command, HealOrder, NodeEvent, SetTimer
from gpufleet.core.events import NodeHealReport, TimerFired
from gpufleet.core.heal import HealAction, HealBook, HealNote, HealOver, HealStep
from gpufleet.core.jobmaster import JobMaster
from gpufleet.model.heal import HealPolicy

HEAL_TIMER = "heal"  # a step's deadline: job_id is the node, attempt the round
HEAL_RESUME = "passed its burn-in"  # the why of the loop's resume


class Healer:
    def __init__(self, state: ClusterState, jobmaster: JobMaster, policy: HealPolicy | None):
        self.state = state
        self.jm = jobmaster
        self.book = HealBook(policy) if policy is not None else None

    def holds(self, node: str) -> bool:
        """The loop keeps the node out of service (a health report does not bring it back)."""
        return self.book is not None and self.book.healing(node)

    # ----- events -------------------------------------------------------------------------

    def fault(self, node: str, why: str, now: float, out: list[Command]) -> None:
        """A GPU fault drained the node (not a fault of its own that spares its jobs)."""
        if self.book is not None:
            self._do(self.book.fault(node, why, now), now, out)

    def report(self, ev: NodeHealReport, now: float, out: list[Command]) -> None:
        if self.book is not None:
            peer = self._peer(ev.node)
            self._do(
                self.book.report(ev.node, ev.round, ev.step, ev.ok, ev.detail, now, peer), now, out
            )

    def timer(self, ev: TimerFired, now: float, out: list[Command]) -> None:
        if self.book is not None:
            self._do(self.book.timed_out(ev.job_id, ev.attempt, now), now, out)

    def lost(self, node: str) -> None:
        if self.book is not None:
            self.book.interrupted(node)

    def up(self, node: str) -> None:
        """The node's agent registered (again): a round it was in is void (a restarted agent
        forgot it; its answer, should one come, is stale), and the next may start."""
        if self.book is not None:
            self.book.interrupted(node)
            self.book.heard(node)

    def admin(self, node: str, *, resumed: bool) -> None:
        if self.book is not None:
            self.book.cleared(node, resumed=resumed)

    def restore(
        self, node: str, phase: str, failures: list[tuple[float, str]], round_: int = 0
    ) -> None:
        if self.book is not None:
            self.book.restore(node, phase, failures, round_)

    def advance(self, now: float, out: list[Command]) -> None:
        """Start the next round on each waiting node that runs nothing now (a reset and a
        stress test would disturb its jobs; the ones on its bad GPUs were stopped already)."""
        if self.book is None:
            return
        for name in self.book.waiting():
            node = self.state.nodes.get(name)
            if node is None or node.lost or node.suspect or self.jm.jobs_on(name):
                continue
            self._do(self.book.ready(name, now, self._peer(name)), now, out)

    # ----- actions ------------------------------------------------------------------------

    def _peer(self, name: str) -> str:
        """A node in service for the network layer: the first by name, idle ones first."""
        best = ""
        for other in sorted(self.state.nodes):
            n = self.state.nodes[other]
            if other == name or not n.schedulable:
                continue
            if n.state == "idle":
                return other
            best = best or other
        return best

    def _do(self, actions: list[HealAction], now: float, out: list[Command]) -> None:
        assert self.book is not None
        p = self.book.policy
        for a in actions:
            node = self.state.nodes.get(a.node)
            if isinstance(a, HealStep):
                out.append(
                    HealOrder(
                        a.node,
                        a.round,
                        a.step,
                        remedy=p.remedy,
                        command=p.command,
                        burn_in_s=p.burn_in_s,
                        peer=a.peer if p.network else "",
                        timeout_s=p.step_timeout_s,
                        net_limits=(p.network_min_gbps, p.network_max_rtt_ms),
                    )
                )
                out.append(SetTimer(a.deadline, HEAL_TIMER, a.node, a.round))
            elif isinstance(a, HealNote):
                out.append(NodeEvent(a.node, a.what, now, a.why))
                if node is not None and node.drained:
                    node.why = a.why
            elif isinstance(a, HealOver) and node is not None:
                if a.ok and node.health_drained:
                    node.drained = node.health_drained = False
                    # the burn-in ran the agent's health checks after the remedy: they passed,
                    # though its next health report may come a heartbeat later
                    node.healthy, node.bad_gpus = True, frozenset()
                    node.why = HEAL_RESUME
                    out.append(NodeEvent(a.node, "resumed", now, HEAL_RESUME))
                elif not a.ok:
                    node.why = a.why
                self.state.node_changed(a.node)
                self.state.dirty = True
