"""Why a job can never use GPUs offered as time-sliced replicas (model/replicas.py)."""

from __future__ import annotations

from gpufleet.model import replicas
from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.workspace import Workspace


def replica_refusal(s: JobSpec, empty: Workspace) -> Reason | None:
    """When every GPU node the job could use offers its GPUs as replicas and the job asks for
    other than one replica per worker: refused, as NVIDIA's device plugin does with
    failRequestsGreaterThanOne. None when a node without replicas could serve it."""
    if not s.gpus_per_worker:
        return None
    gpu_nodes = [i for i in range(empty.n) if empty.gfree[i]]
    if s.gpu_models:
        gpu_nodes = [i for i in gpu_nodes if empty.model[i] in s.gpu_models]
    counts = {empty.replicas[i] for i in gpu_nodes}
    if not gpu_nodes or 0 in counts:
        return None
    if any(replicas.takes(n, s.gpus_per_worker, s.gpu_milli) for n in counts):
        return None
    n = min(counts)
    return Reason(
        ReasonCode.NEVER,
        replicas.refusal(n, s.gpus_per_worker, s.gpu_milli),
        {"gpu_replicas": n, "asked_gpus": s.gpus_per_worker, "asked_milli": s.gpu_milli},
    )


def replicas_held(s: JobSpec, ws: Workspace, data: dict[str, object]) -> Reason | None:
    """Why a one-replica job waits when every replica of the GPUs that could give it one is
    held (None when some such GPU has a replica free: it waits for something else)."""
    if s.gpus_per_worker != 1:
        return None
    nodes = [i for i in _replica_nodes(s, ws) if replicas.takes(ws.replicas[i], 1, s.gpu_milli)]
    if not nodes or any(f >= s.gpu_milli for i in nodes for f in ws.gfree[i]):
        return None
    n = ws.replicas[nodes[0]]
    gpus = sum(len(ws.gfree[i]) for i in nodes)
    data.update(gpu_replicas=n, replica_gpus=gpus)
    return Reason(
        ReasonCode.RESOURCES,
        f"needs one replica ({s.gpu_milli / MILLI:g} of a GPU); all {n * gpus} replicas of the "
        f"{gpus} GPU{'s' if gpus != 1 else ''} time-sliced as {n} each are held, and no other "
        "node has that share free now",
        data,
    )


def whole_behind_replicas(
    s: JobSpec, ws: Workspace, free: int, data: dict[str, object]
) -> Reason | None:
    """Why a whole-GPU job waits when GPUs offered as replicas would serve it but are held (by
    replicas or whole): such a GPU is given whole only when none of its replicas is held
    (Slurm's gpu beside shards, ADR 0054). None when no such GPU is held."""
    nodes = _replica_nodes(s, ws)
    held = sum(1 for i in nodes for f in ws.gfree[i] if f < MILLI)
    if not held:
        return None
    n = ws.replicas[nodes[0]]
    data.update(gpu_replicas=n, replica_gpus_held=held)
    return Reason(
        ReasonCode.RESOURCES,
        f"needs {s.describe()}, whole; {free} free now: {held} GPU{'s' if held != 1 else ''} "
        f"time-sliced as {n} replicas each {'are' if held != 1 else 'is'} held, by replicas or "
        "whole, and such a GPU is given whole only when none of its replicas is held",
        data,
    )


def _replica_nodes(s: JobSpec, ws: Workspace) -> list[int]:
    """The usable nodes offering replicas, of the GPU models the job allows."""
    nodes = [i for i in range(ws.n) if ws.replicas[i] and ws.ok[i]]
    return [i for i in nodes if ws.model[i] in s.gpu_models] if s.gpu_models else nodes
