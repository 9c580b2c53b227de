"""Step 5's victim search on free counts, for a gang whose placement is known in advance.

``preemption.preempt_scan`` releases the candidates one by one on a copy of the workspace and
tries a real placement (on another copy) after each, then tries again without each victim
(the reprieve). For a ``whatif.first_fit_gang`` a placement succeeds exactly when the workers
that fit on fully free GPUs (its room) are at least the gang's workers, and such a placement
draws no random number, so the same answer comes from per-node free vectors: no copy, no
placement, no bucket update per candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.allocation import Allocation
from gpufleet.scheduler.free_counts import full_count
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import RunningJob
from gpufleet.scheduler.workspace import Workspace


class _Room:
    """Workers of ``req`` that fit on fully free GPUs, over the nodes the workspace indexes
    (schedulable, of an allowed model), as releases add to their free vectors."""

    def __init__(self, ws: Workspace, req: WorkerRequest) -> None:
        self.ws = ws
        self.g = g = req.gpus
        models = ws.allowed_models(req)
        self.allowed = set(models)
        self.room = 0
        for m in models:
            for k, bucket in enumerate(ws.buckets[m]):
                self.room += len(bucket) * (k // g)
        self.gfree: dict[int, tuple[int, ...]] = {}  # nodes a release changed: their vector

    def counts(self, i: int) -> bool:
        ws = self.ws
        return ws.ok[i] and bool(ws.gfree[i]) and ws.model[i] in self.allowed

    def release(self, alloc: Allocation) -> None:
        ws = self.ws
        for p in alloc:
            i = ws.by_name.get(p.node)
            if i is None:
                continue
            old = self.gfree.get(i, ws.gfree[i])
            devs = list(old)
            for d in p.gpus:
                devs[d] += p.gpu_milli
            new = self.gfree[i] = tuple(devs)
            if self.counts(i):
                self.room += full_count(new) // self.g - full_count(old) // self.g

    def taken_back(self, alloc: Allocation) -> tuple[int, dict[int, tuple[int, ...]]]:
        """The room were ``alloc``'s devices taken again, and the vectors that would change:
        a release undone on its own nodes (the vectors are sums, in any order)."""
        ws = self.ws
        room = self.room
        changed: dict[int, tuple[int, ...]] = {}
        for p in alloc:
            i = ws.by_name.get(p.node)
            if i is None:
                continue
            old = changed[i] if i in changed else self.gfree.get(i, ws.gfree[i])
            devs = list(old)
            for d in p.gpus:
                devs[d] -= p.gpu_milli
            new = changed[i] = tuple(devs)
            if self.counts(i):
                room += full_count(new) // self.g - full_count(old) // self.g
        return room, changed


def fewest_victims(
    req: WorkerRequest,
    workers: int,
    cands: Sequence[RunningJob],
    ws: Workspace,
    now: float,
) -> list[RunningJob]:
    """``preemption.preempt_scan``'s answer for a first-fit gang of ``workers`` × ``req``: the
    shortest prefix of ``cands`` whose release gives it room, less each victim (dearest
    first) that it turns out not to need; [] if all of them are not enough."""
    room = _Room(ws, req)
    chosen: list[RunningJob] = []
    for v in cands:
        room.release(v.allocation)
        chosen.append(v)
        if room.room >= workers:
            break
    else:
        return []
    # reprieve, as the scan does: each trial releases the victims still chosen but one, which
    # is ``room`` (all of them released) with that one's devices taken back
    for v in sorted(chosen[:-1], key=lambda r: -r.lost_work(now)):
        without, changed = room.taken_back(v.allocation)
        if without >= workers:
            room.room = without
            room.gfree.update(changed)
            # by identity: the candidates have distinct ids, and == compares whole specs
            del chosen[next(k for k, o in enumerate(chosen) if o is v)]
    return chosen
