"""Core state → API responses."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpufleet.api import schemas as s
from gpufleet.api.jobmetrics import JobMetricsOut
from gpufleet.core.state import JobRecord, NodeRuntime
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.job_end import JobEnd
from gpufleet.model.reason import Reason
from gpufleet.model.resources import MILLI

if TYPE_CHECKING:
    from gpufleet.server.store import JobEvent


def spec_dict(rec: JobRecord) -> dict[str, Any]:
    """The spec a job shows, to its owner and admins alike: never the environment captured at
    submit (it may hold the submitter's credentials)."""
    from gpufleet.server.store.codec import HIDDEN_SPEC_KEYS, spec_to_dict

    d = spec_to_dict(rec.job.spec)
    for key in HIDDEN_SPEC_KEYS:
        del d[key]
    return d


def iso8601(t: float) -> str:
    """A Clock time (seconds since the epoch) as ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(round(t), UTC).isoformat().replace("+00:00", "Z")


def reason_out(r: Reason | None) -> s.ReasonOut | None:
    if r is None:
        return None
    at = r.estimated_start
    return s.ReasonOut(
        code=r.code.value,
        message=r.message,
        data=dict(r.data),
        estimated_start=at,
        estimated_start_at=None if at is None else iso8601(at),
        start_bound=r.start_bound,
        start_low=r.start_low,
        start_high=r.start_high,
        slurm=r.slurm,
    )


def job_out(
    rec: JobRecord,
    reason: Reason | None,
    *,
    events: Sequence[JobEvent] | None = None,
    metrics: JobMetricsOut | None = None,
) -> s.JobOut:
    """``events``: the job's stored transitions (the store has them all, with their attempt;
    the in-memory history starts again at a restart); ``metrics``: its own (jobmetrics.py)."""
    j = rec.job
    spec = j.spec
    active = j.state.value in ("STARTING", "RUNNING")
    return s.JobOut(
        id=j.id,
        name=spec.name,
        user=spec.user,
        queue=spec.queue,
        state=j.state.value,
        attempt=j.attempt,
        retries_used=j.retries_used,
        submit_time=j.submit_time,
        start_time=j.start_time,
        end_time=j.end_time,
        gpus=spec.total_gpu_milli / MILLI,
        workers=spec.workers,
        spec=spec_dict(rec),
        placement=[
            s.PlacementOut(
                node=p.node,
                gpus=list(p.gpus),
                gpu_milli=p.gpu_milli,
                cpu_milli=p.cpu_milli,
                memory_mib=p.memory_mib,
            )
            for p in rec.allocation
        ]
        if active or j.finished
        else [],
        # a running job's Reason is its idle-GPU warning, if any (core/idle.py)
        reason=reason_out(reason) if j.state.value in ("PENDING", "RUNNING") else None,
        events=[
            s.EventOut(time=e.time, attempt=e.attempt, state=e.new.value, why=e.why) for e in events
        ]
        if events is not None
        else None,
        array_id=rec.array_id,
        array_index=rec.array_index,
        metrics=metrics,
        ended=ended_out(j.ended) if j.finished else None,
    )


def ended_out(e: JobEnd | None) -> s.JobEndOut | None:
    if e is None:
        return None
    return s.JobEndOut(
        reason=e.reason,
        exit_code=e.exit_code,
        code=e.code,
        signal=e.signal,
        dependency=e.dependency,
    )


def powered_off_out(spec: NodeSpec, state: str, why: str) -> s.NodeOut:
    """An elastic pool's node that is not up (``powered_down``, ``powering_up``,
    ``powering_down``, ``power_failed``): its configured shape, nothing allocated."""
    return s.NodeOut(
        name=spec.name,
        state=state,
        gpu_model=spec.gpu_model,
        gpus=spec.gpus,
        gpus_free=spec.gpus,
        cpu_cores=spec.cpu_milli / MILLI,
        cpu_free=spec.cpu_milli / MILLI,
        memory_gib=spec.memory_mib / 1024,
        memory_free_gib=spec.memory_mib / 1024,
        leaf=spec.leaf,
        pod=spec.pod,
        why=why,
        labels=dict(spec.labels),
        features=list(spec.features),
        gres_type=spec.gpu_type,
    )


def node_out(
    n: NodeRuntime,
    last_seen: float | None,
    jobs: list[str],
    *,
    address: str = "",
    driver_version: str = "",
    cuda_version: str = "",
    gpu_info: Sequence[s.GpuInfo] = (),
) -> s.NodeOut:
    """``address``, versions and ``gpu_info``: what the node's agent registered with."""
    sp = n.spec
    return s.NodeOut(
        name=sp.name,
        state=n.state,
        gpu_model=sp.gpu_model,
        gpus=sp.gpus,
        gpus_free=sum(n.gpu_free) / MILLI,
        cpu_cores=sp.cpu_milli / MILLI,
        cpu_free=n.cpu_free / MILLI,
        memory_gib=sp.memory_mib / 1024,
        memory_free_gib=n.mem_free / 1024,
        leaf=sp.leaf,
        pod=sp.pod,
        why=n.why,
        labels=dict(sp.labels),
        features=list(sp.features),
        gres_type=sp.gpu_type,
        last_heartbeat=last_seen,
        jobs=jobs,
        address=address,
        driver_version=driver_version,
        cuda_version=cuda_version,
        gpu_info=list(gpu_info),
    )
