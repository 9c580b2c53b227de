"""Resource vectors in the units the scheduler counts: GPU-milli, CPU-milli, MiB."""

from __future__ import annotations

from dataclasses import dataclass

MILLI = 1000  # one whole GPU (or CPU core) in milli units


@dataclass(frozen=True, slots=True)
class Resources:
    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0

    def __add__(self, o: Resources) -> Resources:
        return Resources(
            self.gpu_milli + o.gpu_milli,
            self.cpu_milli + o.cpu_milli,
            self.memory_mib + o.memory_mib,
        )

    def __sub__(self, o: Resources) -> Resources:
        return Resources(
            self.gpu_milli - o.gpu_milli,
            self.cpu_milli - o.cpu_milli,
            self.memory_mib - o.memory_mib,
        )

    def fits_in(self, o: Resources) -> bool:
        return (
            self.gpu_milli <= o.gpu_milli
            and self.cpu_milli <= o.cpu_milli
            and self.memory_mib <= o.memory_mib
        )

    def clamp0(self) -> Resources:
        return Resources(max(0, self.gpu_milli), max(0, self.cpu_milli), max(0, self.memory_mib))

    @property
    def gpus(self) -> float:
        return self.gpu_milli / MILLI

    def describe(self) -> str:
        return (
            f"{self.gpu_milli / MILLI:g} GPUs, {self.cpu_milli / MILLI:g} CPUs, "
            f"{self.memory_mib / 1024:g} GiB"
        )


UNLIMITED = Resources(10**15, 10**15, 10**15)
