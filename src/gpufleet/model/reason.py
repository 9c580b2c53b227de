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
    # smaller jobs are being moved to free one leaf for it (preempt/defrag, ADR 0045)
    DEFRAG = "Defragmenting"
    NEVER = "NeverSchedulable"  # larger than any allowed part of the cluster, even when empty
    BACKOFF = "BackOff"  # waiting out a retry back-off
    BEGIN_TIME = "BeginTime"  # not before its begin time (Slurm's sbatch --begin, its word)
    DEPENDENCY = "Dependency"  # waiting for another job
    # an afterok dependency that can never be met (the job ended otherwise): it waits until its
    # user cancels it, as Slurm's default (kill_invalid_depend cancels it at once; ADR 0072)
    DEP_NEVER = "DependencyNeverSatisfied"
    # held (Slurm's sbatch -H, scontrol hold/uhold): never started until released; by its
    # user, or by an admin, whom only an admin may release (ADR 0074)
    HELD_USER = "JobHeldUser"
    HELD_ADMIN = "JobHeldAdmin"
    ARRAY_LIMIT = "ArrayTaskLimit"  # its array runs as many tasks as its %N allows
    HELD = "Held"  # the head of the order is blocked and this profile does not backfill
    # advance reservations (model/reservation.py): kept off nodes reserved for maintenance, or
    # for a reservation it is not in; waiting for its own reservation to start
    RESV_MAINT = "ReservedForMaintenance"
    RESV_NODES = "ReservedNodes"
    RESV_WAIT = "Reservation"
    # an elastic pool is powering up nodes that it would start on (model/elastic.py)
    GROWING = "PoolGrowing"
    # its user has no Unix account on the nodes that could run it (scheduler/identity.py; Slurm
    # holds a job whose launch failed so, slurmd's "User not found on host"), or the nodes
    # have not said yet
    NO_ACCOUNT = "UserNotFoundOnHost"
    ACCOUNT_LOOKUP = "UserLookup"
    # a RUNNING job's only Reason: its queue's idle-GPU policy has warned it (core/idle.py)
    IDLE = "IdleGpus"


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str
    data: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    estimated_start: float | None = None  # when it should start (seconds, the Clock's time)
    # how sure that is: "reserved" (at the latest, unless nodes fail or a job of higher
    # priority arrives) or "planned" (the queue played forward, if nobody of higher priority
    # arrives; start_low/high say how far such plans were off here); "" with no estimate
    start_bound: str = ""
    # the start's 80 % band (10th to 90th percentile) where the cluster's history gives one
    start_low: float | None = None
    start_high: float | None = None
    # what Slurm's squeue says where the job's place in the queue makes it other than the
    # code's word: Priority behind a job of its partition that waits for resources, or the
    # words of a partition whose nodes such jobs of others hold (scheduler/slurm_words.py);
    # "": the code's word. The code and message stay gpufleet's own (gpufleet why)
    slurm: str = ""

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"


def in_words(seconds: float) -> str:
    """A span for a Reason's message: ``45s``, ``3m 20s``, ``2h 05m``, ``1d 04h`` (messages
    name times relative to the cycle; clients show the absolute time in local time)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def not_eligible(until: float, now: float, begin_time: float) -> Reason:
    """A job not eligible before ``until``: its begin time (sbatch --begin), or a retry's
    back-off."""
    left = in_words(until - now)
    if begin_time and until <= begin_time:
        why = f"not before its begin time (--begin), {left} from now"
        return Reason(ReasonCode.BEGIN_TIME, why, {"until": until})
    return Reason(ReasonCode.BACKOFF, f"retry back-off for {left} more", {"until": until})
