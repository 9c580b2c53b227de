"""NeverSchedulable: whether a job fits nowhere, even on the empty cluster.

Such a job must not become the head of the order: it would hold a strict order, or EASY's one
reservation, for ever. Step 6 tells its user so (``explain.never_reason``).
"""

from __future__ import annotations

from random import Random

from gpufleet.model import replicas
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.request import Shape, shape_of
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.workspace import Workspace


class NeverFits:
    """``never_fits``'s answers in one cycle, per job shape (the answer depends on nothing
    else), and the empty cluster its probes copy."""

    def __init__(self) -> None:
        self.known: dict[Shape, bool] = {}
        self.empty: Workspace | None = None


def never_fits(
    job: PendingJob, snap: Snapshot, profile: Profile, memo: NeverFits | None = None
) -> bool:
    """Whether ``job`` fits nowhere even on the empty cluster (NeverSchedulable). Such a job
    must not become the head: it would hold a strict order, or EASY's one reservation, forever.
    Cheap when whole empty nodes could obviously hold it; else a probe of the empty cluster.
    With ``memo`` (one per cycle), each shape is worked out once."""
    if memo is None:
        return _never_fits_now(job, snap, profile, None)
    key = shape_of(job.spec)
    answer = memo.known.get(key)
    if answer is None:
        answer = memo.known[key] = _never_fits_now(job, snap, profile, memo)
    return answer


def _never_fits_now(
    job: PendingJob, snap: Snapshot, profile: Profile, memo: NeverFits | None
) -> bool:
    s = job.spec
    if (s.workers == 1 or not s.topology.required) and not s.selects_nodes:
        room = 0
        for n in snap.nodes:
            if not n.schedulable or not replicas.takes(
                replicas.of(n.labels), s.gpus_per_worker, s.gpu_milli
            ):
                continue
            if not s.gpu_models or n.gpu_model in s.gpu_models:
                room += min(
                    n.gpus // s.gpus_per_worker if s.gpus_per_worker else s.workers,
                    n.cpu_total // s.cpu_milli if s.cpu_milli else s.workers,
                    n.mem_total // s.memory_mib if s.memory_mib else s.workers,
                )
                if room >= s.workers:
                    return False
    if memo is None:
        probe = Workspace.emptied(snap.nodes)
    else:
        if memo.empty is None:
            memo.empty = Workspace.emptied(snap.nodes)
        probe = memo.empty.copy()  # the same as a fresh one: the probe changes it
    return place_gang(s, probe, profile.place, Random(snap.cycle))[0] is None
