"""What-if on copies of a cycle's workspace, shared by backfill (step 4) and preemption (step 5).

Both release running jobs' allocations on a copy and ask whether a gang fits then. For a gang
that is a ``first_fit_gang`` the answer is known from free counts alone, which both steps use
to avoid placing for real at every step."""

from __future__ import annotations

from gpufleet.model.allocation import Allocation
from gpufleet.model.job import JobSpec
from gpufleet.scheduler.framework import PlacePlugin
from gpufleet.scheduler.gang import levels_for
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.workspace import Workspace


def release(ws: Workspace, alloc: Allocation) -> None:
    """Give back on ``ws`` what ``alloc`` holds (nodes ``ws`` does not know are skipped)."""
    for p in alloc:
        i = ws.by_name.get(p.node)
        if i is not None:
            ws.release(i, p)


def first_fit_gang(
    spec: JobSpec,
    req: WorkerRequest,
    place: PlacePlugin,
    ws: Workspace,
    hosts_ok: bool | None = None,
) -> bool:
    """Whether ``place_gang(spec, ws')`` is known in advance for the workspaces ``ws'`` that
    backfill's reservation makes from ``ws`` (by releasing; no fence): it succeeds exactly when
    the workers that fit on free whole GPUs (their room) are at least ``spec.workers``, and
    ``backfill.failed_try`` is what a failure leaves behind.

    So when the workers want whole GPUs and nothing else (no CPU, memory or dataset; no node
    over-committed), the gang may end up anywhere (then every tighter level's domains need
    that capacity), and the plugin takes the first candidate (``first_fit``: as ``tightest``
    does, drawing no random number, keeping no state). ``hosts_ok``: ``hosts_ok(ws)``, when
    the caller knows it."""
    return (
        req.whole
        and req.gpus > 0
        and req.select is None
        and req.cpu_milli == 0
        and req.memory_mib == 0
        and not req.dataset
        and place.first_fit
        and levels_for(spec, place.prefers_topology)[-1] == "any"
        and (hosts_ok_in(ws) if hosts_ok is None else hosts_ok)
    )


def hosts_ok_in(ws: Workspace) -> bool:
    """No node over-committed in CPU or memory. In a cycle's workspace this stays as it was:
    a worker is assigned only where its CPU and memory fit, and what a failed gang took is
    given back."""
    return min(ws.cpu, default=0) >= 0 and min(ws.mem, default=0) >= 0
