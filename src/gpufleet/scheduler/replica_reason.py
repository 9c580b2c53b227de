"""Why a job can never use GPUs offered as time-sliced replicas (model/replicas.py)."""

from __future__ import annotations

from gpufleet.model import replicas
from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason, ReasonCode
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
