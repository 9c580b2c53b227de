"""Node liveness: when a node whose agent went silent is declared lost.

Each node holds a lease, renewed whenever the controller answers its agent's heartbeat or
registration (other agent traffic does not renew it: an agent that can report but no longer
heartbeats is not keeping its watchdog fed). A node silent for ``grace_s`` is lost:
by then (``server.config.check_fencing``: grace >= lease + fence grace + kill margin) its
agent's watchdog has killed what ran there, even if the agent hangs, so its jobs may run
elsewhere.

Pure: time is a number passed in, on whatever clock the caller renews on (the live controller
uses a monotonic clock, which NTP does not step, so a wall-clock jump never makes a node lost).
The core's driver holds one and asks it when its tick comes round (every step when the rule has
no tick; ``Driver.step``'s ``lease_now``), so the decisions come out as ``NodeLost`` events, in
the driver's order, for the simulator as for the controller.
"""

from __future__ import annotations

from gpufleet.core.events import NodeLost


class NodeLiveness:
    def __init__(self, grace_s: float) -> None:
        if not grace_s > 0:
            raise ValueError(f"node grace {grace_s!r} s must be > 0")
        self.grace_s = grace_s
        self._renewed: dict[str, float] = {}  # node -> when its lease was last renewed

    def renewed(self, node: str, at: float) -> None:
        """Its agent was answered at ``at``: watched from now on, the grace counted from here."""
        self._renewed[node] = at

    def forget(self, node: str) -> None:
        self._renewed.pop(node, None)

    def renewed_at(self, node: str) -> float | None:
        """When its lease was last renewed (None: not watched)."""
        return self._renewed.get(node)

    def restore(self, node: str, at: float | None) -> None:
        """Back to what ``renewed_at`` said (a renewal that turned out not to count)."""
        if at is None:
            self._renewed.pop(node, None)
        else:
            self._renewed[node] = at

    def due(self) -> float | None:
        """When the first watched node's grace runs out (None: no node is watched)."""
        if not self._renewed:
            return None
        return min(self._renewed.values()) + self.grace_s

    def expired(self, at: float) -> list[NodeLost]:
        """The nodes whose grace has run out at ``at`` (``due``), each once: it is watched
        again only when its agent is answered again (``renewed``)."""
        out: list[NodeLost] = []
        for node, since in list(self._renewed.items()):
            # the deadline as ``due`` computes it, so that a step at ``due`` finds the loss
            # (``at - since > grace`` can miss it by a rounding: the simulator, which steps at
            # ``due``, would step there forever)
            if at >= since + self.grace_s:
                silent = at - since
                del self._renewed[node]
                why = f"no heartbeat for {silent:.0f} s (grace {self.grace_s:g} s)"
                out.append(NodeLost(node, why))
        return out
