"""LAS's ``exchange`` rule (ADR 0038): whether stopping a running job that cannot save at a stop
gains more than it costs, as the cluster's own history expects.

Stopping victim v (g_v GPUs, r_v GPU-s expected to go, ℓ_v seconds of work in its attempt, all
lost) for preemptor j (g_j GPUs, n_j GPU-s expected) lets g_v / g_j jobs like j start r_v / g_v
sooner each, and delays v by j's run and its own lost work: the pairwise interchange argument of
the SJF/SRPT proofs, with the lost work added, says the stop gains when r_v > n_j + ℓ_v · g_j;
``exchange`` asks r_v / exchange there, a margin. A job nearly done by its group's history is
left to finish; one expected to run long is stopped early, when little is lost. A job that saves
at a stop (a checkpoint notice) or that no history tells of is left to the levels' rule.
"""

from __future__ import annotations

from gpufleet.scheduler.service_history import ServiceHistory
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot

Need = tuple[float, float]  # the preemptor's expected GPU-s (0: unknown), its GPUs
Worth = tuple[float, float]  # the victim's expected GPU-s to go over exchange, lost s per GPU

UNBOUNDED: Worth = (float("inf"), 0.0)


def need(history: ServiceHistory, job: PendingJob) -> Need:
    got = history.remaining(job.spec, job.attained_gpu_s)
    return got or 0.0, job.spec.total_gpu_milli / 1000


def worth(history: ServiceHistory, exchange: float, r: RunningJob, now: float) -> Worth:
    if r.spec.preempt_notice is not None:
        return UNBOUNDED
    rest = history.remaining(r.spec, r.attained(now))
    if rest is None:
        return UNBOUNDED
    gpus = max(r.spec.total_gpu_milli / 1000, 1e-3)
    return rest / exchange, r.lost_work(now) / gpus


def gains(n: Need, w: Worth) -> bool:
    """r_v / exchange > n_j + ℓ_v · g_j (the module's doc)."""
    return n[0] + w[1] * n[1] < w[0]


class Exchange:
    """The rule with its history and margin; each victim's worth once per snapshot."""

    def __init__(self, history: ServiceHistory, margin: float) -> None:
        self.history, self.margin = history, margin
        self._worths: dict[str, Worth] = {}
        self._for: object = None

    def need(self, job: PendingJob) -> Need:
        return need(self.history, job)

    def worth(self, r: RunningJob, snap: Snapshot) -> Worth:
        if self._for is not snap:
            self._worths, self._for = {}, snap
        w = self._worths.get(r.id)
        if w is None:
            w = self._worths[r.id] = worth(self.history, self.margin, r, snap.now)
        return w

    def allows(self, job: PendingJob, r: RunningJob, snap: Snapshot) -> bool:
        return gains(self.need(job), self.worth(r, snap))
