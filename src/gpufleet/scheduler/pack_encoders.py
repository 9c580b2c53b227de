"""Encoders beside training (issue 28's mixed scheduling): a video job may use the NVENC or
NVDEC engines of a GPU whose compute a training job holds whole, when the operator allows it
(``Profile.pack_encoders``; off by default, and then encoders and training stay apart).

A video job here: one worker, one GPU, a share of it (``gpu_milli`` below a whole GPU), asking
only for video engines (``gpu_engines`` of nvenc, nvdec, nvjpg). Packed, it holds the GPU with
no compute share (``gpu_milli`` 0 in its placement: the core takes nothing from the GPU's free
compute), beside at most as many other packed jobs as the GPU has of the engine it asks for
(an L40S's three NVENC); its CPUs and memory are taken as any job's. The GPU must have no
free compute left (a GPU with room takes the job the ordinary way) and be held by a job that
asks for no video engine (training). Pure: the snapshot's running jobs and the cycle's
workspace only.

Per pool (ADR 0060): a node labelled ``gpufleet.io/pack-encoders`` (the cluster spec's pool
field ``pack_encoders``) says ``true`` (packed there, whatever the controller's flag) or
``false`` (kept apart there, even with the flag); a node without the label follows the flag.

Per queue (ADR 0062): a queue's ``pack_encoders`` decides for its video jobs. Either side may
keep them apart: ``false`` of the job's queue or of the node's pool wins; else ``true`` of
either packs; else the controller's flag (``allowed_on``). A queue's ``false`` also keeps
video jobs off the GPUs its own training jobs hold (ADR 0065)."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.engines import PACK_LABEL, engines_of
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.scheduler.workspace import Workspace

VIDEO = frozenset({"nvenc", "nvdec", "nvjpg"})
GpuKey = tuple[str, int]
LABEL = PACK_LABEL


def allowed_on(labels: Iterable[tuple[str, str]], default: bool, queue: bool | None = None) -> bool:
    """Whether a node with ``labels`` takes video jobs beside training (``default``: the
    controller's ``--pack-encoders``; ``queue``: the job's queue's ``pack_encoders``, None
    when it says nothing): a ``false`` of the queue or the pool keeps them apart, else a
    ``true`` of either packs them, else the flag decides."""
    pool = next((v == "true" for k, v in labels if k == LABEL and v in ("true", "false")), None)
    if queue is False or pool is False:
        return False
    return True if queue or pool else default


def nodes(
    ws: Workspace, default: bool, queue: bool | None = None
) -> tuple[frozenset[int], frozenset[int]]:
    """The workspace's nodes that pack the video jobs of a queue saying ``queue`` beside
    training, and those that do not."""
    on = frozenset(i for i, v in enumerate(ws.views) if allowed_on(v.labels, default, queue))
    return on, frozenset(range(ws.n)) - on


def video_job(spec: JobSpec) -> bool:
    engines = dict(spec.gpu_engines)
    return (
        spec.workers == 1
        and spec.gpus_per_worker == 1
        and 0 < spec.gpu_milli < MILLI
        and bool(engines)
        and set(engines) <= VIDEO
    )


def _holders(
    snap: Snapshot, started: Iterable[tuple[str, JobSpec, Allocation]]
) -> tuple[dict[GpuKey, str], dict[GpuKey, int]]:
    """The GPUs held with compute by a job that asks for no video engine (training), each with
    its queue's name where that queue keeps video jobs off its GPUs (its ``pack_encoders:
    false``; else ""), and how many packed video jobs each GPU has now."""
    training: dict[GpuKey, str] = {}
    packed: dict[GpuKey, int] = {}
    jobs = [(r.spec, r.allocation) for r in snap.running if r.stopping_since is None]
    jobs += [(spec, alloc) for _, spec, alloc in started]
    for spec, alloc in jobs:
        video = bool(set(dict(spec.gpu_engines)) & VIDEO)
        q = snap.queues.get(spec.queue)
        guard = spec.queue if q is not None and q.pack_encoders is False else ""
        for p in alloc:
            for d in p.gpus:
                if p.gpu_milli == 0:
                    packed[(p.node, d)] = packed.get((p.node, d), 0) + 1
                elif not video:
                    training[(p.node, d)] = guard
    return training, packed


def where(
    spec: JobSpec,
    snap: Snapshot,
    ws: Workspace,
    started: Iterable[tuple[str, JobSpec, Allocation]],
    among: frozenset[int],
    guarded: bool = False,
) -> tuple[int, int, str] | None:
    """(node index, GPU, "") of ``among`` a video job may be packed onto now; None when none.
    ``guarded``: instead, one it could have been but for the policy of the training job's
    queue, that queue's name the third."""
    if not among:
        return None
    training, packed = _holders(snap, started)
    if not training:
        return None
    want = dict(spec.gpu_engines)
    req = WorkerRequest.of(spec)
    for i, v in enumerate(ws.views):
        if (
            i not in among
            or not ws.ok[i]
            or (req.select is not None and not ws.selected(i, req.select))
        ):
            continue
        if req.models and v.gpu_model not in req.models:
            continue
        e = engines_of(v.gpu_model)
        room = min((e.count(k) or 0) // max(1, n) for k, n in want.items())
        if room <= 0 or ws.cpu[i] < req.cpu_milli or ws.mem[i] < req.memory_mib:
            continue
        for d, free in enumerate(ws.gfree[i]):
            key = (v.name, d)
            guard = training.get(key)
            if guard is None or free != 0 or bool(guard) is not guarded:
                continue
            if packed.get(key, 0) < room:
                return i, d, guard
    return None


def pack(
    spec: JobSpec,
    snap: Snapshot,
    ws: Workspace,
    started: Iterable[tuple[str, JobSpec, Allocation]],
    among: frozenset[int],
) -> Allocation | None:
    """The video job packed onto a training GPU of ``among`` (its placement's compute share 0),
    or None."""
    got = where(spec, snap, ws, started, among)
    if got is None:
        return None
    i, d, _ = got
    req = WorkerRequest.of(spec)
    engine_only = WorkerRequest(1, 0, req.cpu_milli, req.memory_mib, req.models, "", None)
    p: Placement = ws.assign(i, (d,), engine_only)
    return (p,)


def kept_apart(
    spec: JobSpec,
    snap: Snapshot,
    ws: Workspace,
    off: frozenset[int],
    queue: bool | None = None,
    on: frozenset[int] = frozenset(),
) -> str:
    """What a waiting video job is told when packing, off on the nodes ``off``, would have
    placed it there, or on a node of ``on`` but for the training job's queue ("" if neither);
    ``queue``: its own queue's ``pack_encoders``."""
    got = where(spec, snap, ws, (), off)
    if got is None:
        got = where(spec, snap, ws, (), on, guarded=True)
    if got is None:
        return ""
    i, d, guard = got
    v = ws.views[i]
    if guard:
        who = (
            f"the training there is of queue {guard}, whose policy keeps video jobs off its "
            "GPUs (its pack_encoders: false)"
        )
    elif queue is False:
        who = f"it is kept apart by the policy of queue {spec.queue} (its pack_encoders: false)"
    elif dict(v.labels).get(LABEL) == "false":
        who = "its pool keeps video jobs off training GPUs (the pool's pack_encoders: false)"
    else:
        who = (
            "this cluster keeps video jobs off training GPUs (the controller's "
            "--pack-encoders allows it, or a pool's pack_encoders: true, or its queue's)"
        )
    return (
        f"; GPU {d} of {v.name} is busy with training and has a free "
        f"{'/'.join(e.upper() for e in dict(spec.gpu_engines))}, but {who}"
    )
