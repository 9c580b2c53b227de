"""One worker's demand, as the placement code sees it."""

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
        )
