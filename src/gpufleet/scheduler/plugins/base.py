"""Bases for policy plugins: each answers the optional members of its extension point's
Protocol (``scheduler.framework``) the plain way, so a plugin states only what it changes and
the cycle reads every member directly (no probing with ``getattr``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence

from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason
from gpufleet.scheduler.framework import (
    NO_VICTIMS,
    SUCCESS,
    Admission,
    OrderPlugin,
    Status,
    Victims,
)
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, ServiceMark, Snapshot
from gpufleet.scheduler.usage import QueueUsage
from gpufleet.scheduler.workspace import Workspace


class OrderBase:
    """An order with no preemption rule of its own (it outranks nobody), for which past usage
    decays with Slurm's default half-life."""

    half_life_s = 7 * 86400.0

    def outranks(self, job: PendingJob, victim: RunningJob, snap: Snapshot) -> bool:
        return False

    def outrank_key(self, job: PendingJob, snap: Snapshot) -> Hashable | None:
        return None

    def outranked(self, job: PendingJob, snap: Snapshot) -> Iterable[RunningJob]:
        return (r for r in snap.running if self.outranks(job, r, snap))

    def started(self, job: PendingJob, now: float) -> ServiceMark:
        m = job.mark
        return m if m.stopped_at is None else ServiceMark(m.base_gpu_s, m.waited(now))

    def finished(self, spec: JobSpec, service_gpu_s: float) -> None:
        pass


class AdmitBase:
    """An admit plugin that must be asked about every job (it promises nothing for queues
    without a quota)."""

    admits_unlimited = False


class PlaceBase:
    """A place plugin that places gangs where the job asks and makes no first-fit promise."""

    prefers_topology = False
    first_fit = False

    def prepare(self, snap: Snapshot, ws: Workspace) -> None:
        pass


class BackfillBase:
    """Later jobs may start around a blocked head, without a reservation by default."""

    reserves = False
    assume_limit_s: float | None = None

    def backfill(self, job: PendingJob, head: PendingJob) -> Status:
        return SUCCESS


def cheapest_first(victims: Iterable[RunningJob], now: float) -> list[RunningJob]:
    """The preemptible ones past their minimum runtime, by (lost work now: since their last
    checkpoint, latest start, id), stably. The keys are made in one pass (lost work written
    out: ``v.lost_work(now)``'s product) and sorted by index: no Python call per comparison
    key, which a cycle with a full cluster pays over every running job."""
    vs = [v for v in victims if v.spec.preemptible and now - v.start_time >= v.spec.min_runtime_s]
    keys = [
        (
            (now - (v.start_time if v.checkpoint_time is None else v.saved_since))
            * v.spec.total_gpu_milli
            / 1000,
            -v.start_time,
            v.id,
        )
        for v in vs
    ]
    return [vs[i] for i in sorted(range(len(vs)), key=keys.__getitem__)]


class PreemptBase(ABC):
    """The preamble every preempt plugin shares: a plugin names the running jobs its rule
    lets ``job`` stop (``candidates``); the base keeps the preemptible ones, least lost work
    first, lets the plugin rank them further (``rank``) and answers a status. No victims key
    by default (the cycle asks once per job)."""

    def victims(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Victims:
        found = self.rank(
            cheapest_first(self.candidates(job, admission, snap, usage, order), snap.now)
        )
        return Victims(SUCCESS, found) if found else NO_VICTIMS

    @abstractmethod
    def candidates(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Iterable[RunningJob]:
        """The running jobs this plugin would take GPUs from (each plugin says which)."""

    def rank(self, victims: list[RunningJob]) -> list[RunningJob]:
        """Victims cheapest first, reordered by the plugin's own rule (stably)."""
        return victims

    def victims_key(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Hashable | None:
        return None

    def reason_for(
        self, job: PendingJob, victims: Sequence[RunningJob], snap: Snapshot
    ) -> Reason | None:
        """The preemptor's Reason when this plugin's rule says it better than the plain one
        (``explain.preempting``); None: the plain one."""
        return None
