"""GPU nodes grouped by their free state, for placements whose score depends on that state alone.

FGD and ``fgd-strand`` score a node by its free CPU, free GPU per device and GPU model; nodes in
the same state score the same. A cluster has far fewer states than nodes (idle nodes of a type
share one; a busy cycle makes a few dozen), so a placement scores each state once and looks at
nodes only in the best-scoring states, in index order (the tie-break of the scored placements).

``StateIndex`` mirrors a ``Workspace``: built once per workspace (O(nodes); a copy's index is
copied from its original's), it catches up on ``Workspace.touched``, the nodes whose free
capacity changed, so an assignment costs O(1) here too. Per request shape it keeps the states
by score (``tiers``), brought up to date from the states made and emptied since. Pure: no I/O,
no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Mapping

from gpufleet.model.resources import MILLI
from gpufleet.scheduler.workspace import Domain, Workspace

StateKey = tuple[int, int, tuple[int, ...], str]  # (cpu free, memory free, free per device, model)
Tiers = dict[int, dict[StateKey, None]]  # score → the states with it


class StateIndex:
    """The schedulable GPU nodes of one workspace by state, and by (state, leaf)."""

    def __init__(self, ws: Workspace) -> None:
        self.log = ws.touched
        self.pos = len(ws.touched)
        self.leaf = ws.node_leaf
        self.key_of: list[StateKey | None] = [None] * ws.n
        self.nodes: dict[StateKey, dict[int, None]] = {}
        self.leaf_nodes: dict[tuple[StateKey, int], dict[int, None]] = {}
        self.heaps: dict[StateKey, list[int]] = {}  # per state its nodes, a min-heap (lazy)
        # the states made (True) or emptied, in order: two lists, not a list of pairs, and one
        # key object per state (``canon``), so that a worker placed leaves few objects for the
        # garbage collector to count (a full collection in a cycle costs more than the index)
        self.events: list[StateKey] = []
        self.made: list[bool] = []
        self.canon: dict[StateKey, StateKey] = {}
        self._tiers: dict[Hashable, tuple[Tiers, list[int]]] = {}
        for i in range(ws.n):
            self._add(ws, i)

    def fresh_for(self, ws: Workspace) -> bool:
        """Whether this index follows ``ws`` (the workspace it was built on, log unchanged)."""
        return self.log is ws.touched

    def copied_for(self, ws: Workspace) -> StateIndex | None:
        """An index of ``ws`` made from this one, where ``ws`` is a copy of the workspace this
        index follows taken no earlier than this index's last catch-up (else None)."""
        src = ws.copied_from
        if src is None or not self.fresh_for(src[0]) or self.pos > src[1]:
            return None
        c = object.__new__(StateIndex)
        c.log, c.pos, c.leaf = ws.touched, 0, self.leaf
        c.key_of = list(self.key_of)
        c.nodes = {k: b.copy() for k, b in self.nodes.items()}
        c.leaf_nodes = {k: b.copy() for k, b in self.leaf_nodes.items()}
        c.heaps = {k: h.copy() for k, h in self.heaps.items()}
        c.canon = dict(self.canon)
        c.events, c.made, c._tiers = [], [], {}
        for i in set(src[0].touched[self.pos : src[1]]):
            c._drop(i)
            c._add(ws, i)
        return c

    def _add(self, ws: Workspace, i: int) -> None:
        g = ws.gfree[i]
        if not ws.ok[i] or not ws.model[i] or not g:
            self.key_of[i] = None
            return
        key = (ws.cpu[i], ws.mem[i], g, ws.model[i])
        b = self.nodes.get(key)
        if b is None:
            self.canon[key] = key
            self.nodes[key] = {i: None}
            self.heaps[key] = [i]
            self.events.append(key)
            self.made.append(True)
        else:
            key = self.canon[key]
            b[i] = None
            heapq.heappush(self.heaps[key], i)
        self.key_of[i] = key
        lk = (key, self.leaf[i])
        lb = self.leaf_nodes.get(lk)
        if lb is None:
            lb = self.leaf_nodes[lk] = {}
        lb[i] = None

    def _drop(self, i: int) -> None:
        key = self.key_of[i]
        if key is None:
            return
        b = self.nodes[key]
        del b[i]
        if not b:
            del self.nodes[key]
            del self.heaps[key]
            del self.canon[key]
            self.events.append(key)
            self.made.append(False)
        lk = (key, self.leaf[i])
        lb = self.leaf_nodes[lk]
        del lb[i]
        if not lb:
            del self.leaf_nodes[lk]

    def sync(self, ws: Workspace) -> None:
        """Catch up on the nodes ``ws`` changed since the last call."""
        log = ws.touched
        n = len(log)
        if self.pos == n - 1:  # one change: the common case, one worker placed
            i = log[-1]
            self._drop(i)
            self._add(ws, i)
        elif self.pos < n:
            for i in set(log[self.pos :]):
                self._drop(i)
                self._add(ws, i)
        self.pos = n

    def tiers(
        self,
        shape: Hashable,
        known: Mapping[StateKey, tuple[int, object]],
        score_of: Callable[[StateKey], int],
    ) -> Tiers:
        """The states by ``score_of`` (states it gives a negative score are left out), kept per
        ``shape``: ``score_of`` must give a state of a shape the same score every time;
        ``known`` holds the scores it gave so far (first in each value)."""
        hit = self._tiers.get(shape)
        if hit is None:
            by: Tiers = {}
            for key in self.nodes:
                s = score_of(key)
                if s >= 0:
                    by.setdefault(s, {})[key] = None
            self._tiers[shape] = (by, [len(self.events)])
            return by
        by, pos = hit
        events = self.events
        if pos[0] < len(events):
            p = pos[0]
            for key, made in zip(events[p:], self.made[p:], strict=True):
                k = known.get(key)
                s = score_of(key) if k is None else k[0]
                if s < 0:
                    continue
                if made:
                    t = by.get(s)
                    if t is None:
                        by[s] = {key: None}
                    else:
                        t[key] = None
                else:
                    t = by.get(s)
                    if t is not None:
                        t.pop(key, None)
                        if not t:
                            del by[s]
            pos[0] = len(events)
        return by

    def low(self, key: StateKey) -> int:
        """The lowest index of the nodes in state ``key``."""
        h, b = self.heaps[key], self.nodes[key]
        while h[0] not in b:
            heapq.heappop(h)
        return h[0]

    def in_domain(self, key: StateKey, ws: Workspace, domain: Domain) -> list[dict[int, None]]:
        """The node sets of state ``key`` inside ``domain`` (level any, leaf or pod)."""
        if domain.level == "any":
            return [self.nodes[key]]
        leaves = [domain.index] if domain.level == "leaf" else ws.pod_leaves[domain.index]
        out = []
        for leaf in leaves:
            b = self.leaf_nodes.get((key, leaf))
            if b:
                out.append(b)
        return out


def state_fits(
    key: StateKey, cpu: int, mem: int, gpus: int, milli: int, models: tuple[str, ...]
) -> bool:
    """Whether one worker fits a node in state ``key`` (before fences, filters and domains)."""
    if key[0] < cpu or key[1] < mem or (models and key[3] not in models):
        return False
    g = key[2]
    if milli >= MILLI:
        return sum(1 for x in g if x >= MILLI) >= gpus
    return any(x >= milli for x in g)
