"""One worker's demand, as the placement code sees it; a job's shape, as the caches key it."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI


@dataclass(frozen=True, slots=True)
class WorkerRequest:
    gpus: int  # devices per worker (1 when fractional)
    gpu_milli: int  # per device; MILLI for whole GPUs
    cpu_milli: int
    memory_mib: int
    models: tuple[str, ...]  # allowed GPU models; empty = any
    dataset: str = ""
    container: bool = False  # runs in an image: only on a node with a container runtime

    @property
    def whole(self) -> bool:
        return self.gpu_milli >= MILLI

    @staticmethod
    def of(spec: JobSpec) -> WorkerRequest:
        return WorkerRequest(
            spec.gpus_per_worker,
            spec.gpu_milli if spec.gpus_per_worker else 0,
            spec.cpu_milli,
            spec.memory_mib,
            spec.gpu_models,
            spec.dataset,
            spec.container is not None,
        )


Shape = tuple[object, ...]


def shape_of(spec: JobSpec) -> Shape:
    """Everything of a job that decides where (and whether) it can be placed: jobs of equal
    shape place alike in one cycle, so the per-cycle caches (failed placements, never fits,
    preemption room, reasons) key on this. The topology as plain values: cheap to hash."""
    t = spec.topology
    return (
        spec.workers,
        spec.gpus_per_worker,
        spec.gpu_milli,
        spec.cpu_milli,
        spec.memory_mib,
        spec.gpu_models,
        spec.dataset,
        t.level,
        t.required,
        spec.container is not None,
    )
