"""Per-node command queues that agents long-poll."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from gpufleet.api.schemas import AgentCommand


class Outbox:
    def __init__(self) -> None:
        self._queues: dict[str, list[AgentCommand]] = defaultdict(list)
        self._events: dict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def put(self, node: str, cmd: AgentCommand) -> None:
        self._queues[node].append(cmd)
        self._events[node].set()

    def drop(self, node: str) -> None:
        """Forget what a lost node never fetched (its new attempt ids make it stale anyway)."""
        self._queues.pop(node, None)

    def clear(self) -> None:
        """Forget every queue (the controller rebuilt its state: its agents register again)."""
        self._queues.clear()

    def drop_launches(self, node: str, keep: set[tuple[str, int, int]]) -> None:
        """Forget the launches queued for a node except those of ``keep`` (job, attempt, rank);
        kills stay."""
        q = self._queues.get(node)
        if q:
            q[:] = [c for c in q if c.kind != "launch" or (c.job, c.attempt, c.rank) in keep]

    async def take(self, node: str, wait_s: float) -> list[AgentCommand]:
        if not self._queues[node]:
            ev = self._events[node]
            ev.clear()
            try:
                await asyncio.wait_for(ev.wait(), timeout=wait_s)
            except TimeoutError:
                return []
        out, self._queues[node] = self._queues[node], []
        return out

    def pending(self, node: str) -> int:
        return len(self._queues.get(node, ()))
