"""Per-node command queues that agents long-poll, delivered at least once.

A long-poll's answer can be lost: an agent killed (or cut off) while its request waits here
leaves a handler that still wakes on the next command and writes it into a dead connection.
So a take does not remove what it returns: each command has a rising sequence number, and the
agent's next poll says the highest it received (``ack``); only then is it forgotten. A lost
answer is delivered again; the agent runs a launch once whatever reaches it twice. Sequence
numbers start from the wall clock, so that they rise across a restart of ours as well."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict

from gpufleet.api.schemas import AgentCommand


class Outbox:
    def __init__(self) -> None:
        self._queues: dict[str, list[AgentCommand]] = defaultdict(list)
        self._events: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._seq = itertools.count(time.time_ns())
        self._waiting: dict[str, int] = defaultdict(int)
        # the leader's epoch every command carries (high availability, ADR 0032; 0: none)
        self.term = 0

    def put(self, node: str, cmd: AgentCommand) -> None:
        stamp = {"seq": next(self._seq), "term": self.term}
        self._queues[node].append(cmd.model_copy(update=stamp))
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

    def discard(self, node: str, seqs: set[int]) -> None:
        """Forget these commands (launches refused before they were handed over)."""
        q = self._queues.get(node)
        if q:
            q[:] = [c for c in q if c.seq not in seqs]

    def ack(self, node: str, seq: int) -> None:
        """The agent received every command up to ``seq``: forget them."""
        q = self._queues.get(node)
        if q and q[0].seq <= seq:
            q[:] = [c for c in q if c.seq > seq]

    async def take(self, node: str, wait_s: float, ack: int = 0) -> list[AgentCommand]:
        """What is queued for ``node`` after ``ack`` (at once, or as soon as something comes
        within ``wait_s``); it stays queued until a later poll acknowledges it."""
        self.ack(node, ack)
        if not self._queues[node]:
            ev = self._events[node]
            ev.clear()
            self._waiting[node] += 1
            try:
                await asyncio.wait_for(ev.wait(), timeout=wait_s)
            except TimeoutError:
                return []
            finally:
                self._waiting[node] -= 1
        return list(self._queues[node])

    def waiting(self, node: str) -> int:
        """How many long-polls of ``node`` wait here now (a dead agent's may be among them)."""
        return self._waiting.get(node, 0)

    def pending(self, node: str) -> int:
        return len(self._queues.get(node, ()))
