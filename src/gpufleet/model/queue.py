"""Queues (Slurm partitions, Kueue ClusterQueues): quota, weight, and the cohort they borrow in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufleet.model.resources import MILLI, UNLIMITED, Resources
from gpufleet.model.validate import Fields


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    quota: Resources = UNLIMITED  # nominal quota; UNLIMITED when none is set
    weight: float = 1.0  # fair-share weight
    cohort: str = ""  # queues of one cohort lend each other idle quota
    can_borrow: bool = True
    can_lend: bool = True

    @property
    def limited(self) -> bool:
        # identity first: a queue without a quota shares UNLIMITED, and this is asked per job
        return self.quota is not UNLIMITED and self.quota != UNLIMITED

    @staticmethod
    def from_dict(raw: Any, *, source: str, path: str) -> QueueSpec:
        f = Fields(raw, source=source, path=path)
        name = f.text("name", required=True)
        weight = f.number("weight", 1.0, minimum=0.0)
        if weight <= 0:
            raise f.error("weight", "must be greater than 0")
        cohort = f.text("cohort", "")
        quota = UNLIMITED
        if f.has("quota"):
            q = Fields(f.mapping("quota"), source=source, path=f.field("quota"))
            quota = Resources(
                round(q.number("gpus", UNLIMITED.gpu_milli / MILLI, minimum=0) * MILLI),
                round(q.number("cpu_cores", UNLIMITED.cpu_milli / MILLI, minimum=0) * MILLI),
                round(q.number("memory_gib", UNLIMITED.memory_mib / 1024, minimum=0) * 1024),
            )
            q.finish()
        borrow = f.flag("can_borrow", True)
        lend = f.flag("can_lend", True)
        f.finish()
        return QueueSpec(name, quota, weight, cohort, borrow, lend)
