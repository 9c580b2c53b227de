"""The start plan's nodes: where a big job can start, per node, as Slurm's backfill plans on
node bitmaps.

Pure. The plan (``estimate_forward``) counts GPUs over the cluster, which is exact for a 1-GPU
job but not for a job whose workers each need several GPUs on one node: 8 GPUs free on 8
different nodes do not start an 8-GPU worker. So the plan also keeps each node's free GPU milli
(what the running and planned jobs hold, where they hold it): a job of several GPUs per worker
starts only where enough nodes have room for a worker each, and its shadow (the wall behind
which the plan backfills) is the first predicted end at which they have. A planned start is
put where the scheduler's topology placement would put it, near enough: each worker on the
node with the least room that fits it (best fit, so whole nodes stay whole).

``NodeRoom`` keeps the nodes bucketed by how many whole GPUs each has free, so whether a shape
fits and where best fit puts a worker cost a pass over the buckets, not over the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufleet.model.allocation import Allocation
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.snapshot import NodeView

Takes = tuple[tuple[int, int], ...]  # (node index, GPU milli) a job holds


@dataclass(slots=True)
class Wall:
    """What a blocked job keeps for its start at ``at``: a job that runs past it takes from
    ``room`` (GPU milli left over then, over the cluster) and keeps off ``fenced`` (the nodes
    the blocked job would take)."""

    at: float
    room: float
    fenced: frozenset[int] = frozenset()


class NodeRoom:
    """Free GPU milli per node, the nodes bucketed by whole GPUs free."""

    def __init__(self, free: Sequence[int]) -> None:
        self.free = list(free)
        self.total = sum(self.free)
        self.levels: dict[int, dict[int, None]] = {}  # whole GPUs free → nodes, in order
        for i, f in enumerate(self.free):
            self.levels.setdefault(f // MILLI, {})[i] = None

    def counts(self) -> dict[int, int]:
        """How many nodes have each number of whole GPUs free."""
        return {k: len(b) for k, b in self.levels.items() if b}

    def fits(
        self, gpus: int, milli: int, workers: int, avoid: frozenset[int] = frozenset()
    ) -> bool:
        """Whether ``workers`` workers of ``gpus`` devices × ``milli`` each fit now, off the
        nodes ``avoid``: per node for several whole GPUs a worker, else in all."""
        if not node_checked(gpus, milli):
            if not avoid:
                return True  # the cluster's count, checked by the caller
            kept = sum(self.free[n] for n in avoid)
            return self.total - kept >= gpus * milli * workers
        counts = self.counts()
        for n in avoid:
            counts[self.free[n] // MILLI] -= 1
        return slots(counts, gpus) >= workers

    def take(self, takes: Takes) -> None:
        for node, milli in takes:
            self._set(node, self.free[node] - milli)

    def give(self, takes: Takes) -> None:
        for node, milli in takes:
            self._set(node, self.free[node] + milli)

    def place(
        self, gpus: int, milli: int, workers: int, avoid: frozenset[int] = frozenset()
    ) -> Takes:
        """Take ``workers`` workers of ``gpus`` devices × ``milli`` each, best fit (the node with
        the fewest whole GPUs free that has room, the first such node, none of ``avoid``), and
        say where. A worker no node has room for (the cluster's count admitted it, spread over
        nodes) takes what it needs from the nodes with the most free."""
        out: list[tuple[int, int]] = []
        need = gpus * milli
        whole = max(1, -(-need // MILLI))
        for _ in range(workers):
            node = self._tightest(whole, avoid)
            if node is not None:
                self._set(node, self.free[node] - need)
                out.append((node, need))
            else:
                out.extend(self._spread(need, avoid))
        return tuple(out)

    def _tightest(self, whole: int, avoid: frozenset[int]) -> int | None:
        for k in sorted(self.levels):
            if k >= whole:
                for node in self.levels[k]:
                    if node not in avoid:
                        return node
        return None

    def _spread(self, need: int, avoid: frozenset[int]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for k in sorted(self.levels, reverse=True):
            for node in list(self.levels[k]):
                if need <= 0:
                    return out
                if node in avoid:
                    continue
                got = min(need, self.free[node])
                if got > 0:
                    self._set(node, self.free[node] - got)
                    out.append((node, got))
                    need -= got
        return out

    def _set(self, node: int, value: int) -> None:
        old = self.free[node] // MILLI
        new = value // MILLI
        self.total += value - self.free[node]
        self.free[node] = value
        if old != new:
            del self.levels[old][node]
            self.levels.setdefault(new, {})[node] = None


def slots(counts: dict[int, int], gpus: int) -> int:
    """How many workers of ``gpus`` whole GPUs fit on nodes counted so (whole GPUs free →
    nodes)."""
    return sum(n * (k // gpus) for k, n in counts.items() if k >= gpus)


class Probe:
    """What-if releases on a ``NodeRoom`` (for a shadow), leaving it as it is."""

    def __init__(self, room: NodeRoom) -> None:
        self.room = room
        self.counts = room.counts()
        self.changed: dict[int, int] = {}

    def add(self, takes: Takes, sign: int) -> None:
        free, counts, changed = self.room.free, self.counts, self.changed
        for node, milli in takes:
            old = changed.get(node, free[node])
            new = old + sign * milli
            changed[node] = new
            if old // MILLI != new // MILLI:
                counts[old // MILLI] -= 1
                counts[new // MILLI] = counts.get(new // MILLI, 0) + 1

    def fits(self, gpus: int, workers: int) -> bool:
        return slots(self.counts, gpus) >= workers

    def pick(self, gpus: int, workers: int) -> frozenset[int]:
        """The nodes ``workers`` workers of ``gpus`` whole GPUs would take now, best fit (as
        ``NodeRoom.place``), one worker a node."""
        free, changed = self.room.free, self.changed
        room = [(changed.get(i, f) // MILLI, i) for i, f in enumerate(free)]
        fit = sorted(x for x in room if x[0] >= gpus)
        return frozenset(i for _, i in fit[:workers])


def node_checked(gpus: int, milli: int) -> bool:
    """Whether a job's start is checked per node: workers of several whole GPUs each (one GPU,
    or a share of one, fits wherever the cluster's count says a GPU is free)."""
    return gpus >= 2 and milli >= MILLI


def takes_of(alloc: Allocation, index: dict[str, int]) -> Takes:
    """An allocation's placements as (node index, GPU milli), on the nodes ``index`` knows."""
    out = []
    for p in alloc:
        node = index.get(p.node)
        if node is not None:
            out.append((node, p.gpu_milli * len(p.gpus)))
    return tuple(out)


def room_of(nodes: Iterable[NodeView]) -> tuple[NodeRoom, dict[str, int]]:
    """The schedulable ``nodes`` with nothing held on them, and each one's index there by name
    (the holds are then taken where they run)."""
    index: dict[str, int] = {}
    sizes: list[int] = []
    for n in nodes:
        if n.schedulable:
            index[n.name] = len(sizes)
            sizes.append(MILLI * len(n.gpu_free))
    return NodeRoom(sizes), index
