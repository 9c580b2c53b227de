"""Where a job's workers run: one Placement per worker."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Placement:
    """One worker's share of one node: device indices, and per-device GPU milli."""

    node: str
    gpus: tuple[int, ...]
    gpu_milli: int  # taken from each device in ``gpus``
    cpu_milli: int
    memory_mib: int

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_milli * len(self.gpus)


Allocation = tuple[Placement, ...]


def nodes_of(allocation: Allocation) -> tuple[str, ...]:
    """The distinct nodes of an allocation, in worker order."""
    return tuple(dict.fromkeys(p.node for p in allocation))
