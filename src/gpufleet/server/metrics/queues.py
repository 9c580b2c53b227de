"""The queue and job series: pending jobs per queue and Reason, running jobs, the oldest wait,
quotas and borrowing, fair-share figures, the wait-time histogram and the transitions counted
since the start. The tally of pending jobs and the counters are fed by each commit
(``FleetCollector.on_commit``); the rest is read from the core at scrape time."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.core.controller import Controller
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.server.metrics.pending import PendingTally
from gpufleet.server.metrics.text import Family, Labels


@dataclass
class WaitHistogram:
    buckets: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    n: int = 0

    def observe(self, v: float) -> None:
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
        self.total += v
        self.n += 1


def queue_families(
    ctrl: Controller,
    now: float,
    tally: PendingTally,
    waits: Mapping[str, WaitHistogram],
    moves: Mapping[tuple[str, str], int],
    waiting_since: Callable[[PendingJob], float],
) -> list[Family]:
    """``waits``: per queue, the wait before first starts; ``moves``: (queue, new state) →
    transitions since the start; ``waiting_since``: to rebuild a tally that lost count."""
    if len(tally) != ctrl.pending_count:  # restored from the store, or installed late
        tally.rebuild(ctrl.pending_jobs(), waiting_since)
    tally.refresh(ctrl.last.reasons if ctrl.last is not None else None)
    pending = tally.counts()
    oldest = {q: max(0.0, now - since) for q, since in tally.oldest_since().items()}
    running: dict[str, int] = {}
    for rj in ctrl.running.values():
        running[rj.spec.queue] = running.get(rj.spec.queue, 0) + 1
    names = sorted(set(ctrl.queues) | {q for q, _ in pending} | set(running) | set(waits))
    f_pending = Family(
        "gpufleet_jobs_pending", "gauge", "Pending jobs per queue and Reason code (why each waits)."
    )
    for (q, code), c in sorted(pending.items()):
        f_pending.add(Labels((("queue", q), ("reason", code))), c)
    return [
        f_pending,
        *_queue_load(ctrl, names, running, oldest),
        _wait_family(waits),
        _moves_family(moves),
    ]


def _queue_load(
    ctrl: Controller, names: list[str], running: Mapping[str, int], oldest: Mapping[str, float]
) -> list[Family]:
    f_running = Family("gpufleet_jobs_running", "gauge", "Jobs starting or running, per queue.")
    f_oldest = Family(
        "gpufleet_queue_oldest_pending_seconds",
        "gauge",
        "How long the queue's longest-waiting pending job has waited (since submission or "
        "its last requeue).",
    )
    f_quota = Family(
        "gpufleet_queue_quota_gpus", "gauge", "The queue's nominal GPU quota (queues with one)."
    )
    f_used = Family("gpufleet_queue_allocated_gpus", "gauge", "GPUs allocated to the queue's jobs.")
    f_ratio = Family(
        "gpufleet_queue_quota_used_ratio",
        "gauge",
        "Allocated GPUs over the nominal quota: above 1 the queue borrows from its cohort.",
    )
    f_borrow = Family(
        "gpufleet_queue_borrowing", "gauge", "1 while the queue uses more than its nominal quota."
    )
    f_share = Family(
        "gpufleet_queue_dominant_share",
        "gauge",
        "The queue's dominant share of the schedulable cluster now.",
    )
    f_usage = Family(
        "gpufleet_queue_fair_share_usage",
        "gauge",
        "The queue's decayed past usage (share-seconds) that fair-share ordering compares.",
    )
    f_weight = Family("gpufleet_queue_weight", "gauge", "The queue's fair-share weight.")
    shares = ctrl.dominant_shares()
    usage = ctrl.ledger.values
    for q in names:
        lb = Labels((("queue", q),))
        f_running.add(lb, running.get(q, 0))
        if q in oldest:
            f_oldest.add(lb, oldest[q])
        used = ctrl.queue_used(q).gpu_milli / MILLI
        f_used.add(lb, used)
        spec = ctrl.queues.get(q)
        if spec is not None:
            f_weight.add(lb, spec.weight)
            if spec.limited:
                quota = spec.quota.gpu_milli / MILLI
                f_quota.add(lb, quota)
                f_ratio.add(lb, used / quota if quota else (math.inf if used else 0.0))
                f_borrow.add(lb, int(not ctrl.queue_used(q).fits_in(spec.quota)))
        f_share.add(lb, shares.get(q, 0.0))
        f_usage.add(lb, usage.get(q, 0.0))
    return [f_running, f_oldest, f_quota, f_used, f_ratio, f_borrow, f_share, f_usage, f_weight]


def _wait_family(waits: Mapping[str, WaitHistogram]) -> Family:
    wait = Family(
        "gpufleet_job_wait_seconds",
        "histogram",
        "Seconds from submission to a job's first start, per queue.",
    )
    for q in sorted(waits):
        h = waits[q]
        for b, c in zip(h.buckets, h.counts, strict=True):
            le = str(int(b)) if b == int(b) else repr(b)
            wait.add(Labels((("queue", q), ("le", le))), c, "_bucket")
        wait.add(Labels((("queue", q), ("le", "+Inf"))), h.n, "_bucket")
        wait.add(Labels((("queue", q),)), h.total, "_sum")
        wait.add(Labels((("queue", q),)), h.n, "_count")
    return wait


def _moves_family(moves: Mapping[tuple[str, str], int]) -> Family:
    f = Family(
        "gpufleet_job_transitions_total",
        "counter",
        "Job state transitions since the controller started, per queue and new state.",
    )
    for (q, st), c in sorted(moves.items()):
        f.add(Labels((("queue", q), ("state", st))), c)
    return f
