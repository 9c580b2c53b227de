"""Why a job waits: a code for machines, numbers for dashboards, a sentence for people."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ReasonCode(StrEnum):
    QUOTA = "Quota"  # the queue (and its cohort) has no room under quota
    RESOURCES = "Resources"  # not enough free GPUs/CPU/memory right now
    TOPOLOGY = "Topology"  # enough in total, but not under one node / leaf / pod
    GPU_MODEL = "GpuModel"  # no free capacity of an allowed GPU model
    PRIORITY = "Priority"  # jobs ahead in order are waiting for the same capacity
    RESERVED = "Reserved"  # would start, but only on capacity reserved for an earlier job
    PREEMPTING = "Preempting"  # victims are being stopped to make room
    NEVER = "NeverSchedulable"  # larger than any allowed part of the cluster, even when empty
    BACKOFF = "BackOff"  # waiting out a retry back-off
    DEPENDENCY = "Dependency"  # waiting for another job
    ARRAY_LIMIT = "ArrayTaskLimit"  # its array runs as many tasks as its %N allows
    HELD = "Held"  # the head of the order is blocked and this profile does not backfill


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str
    data: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    estimated_start: float | None = None

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"
