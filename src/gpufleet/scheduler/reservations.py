"""Advance reservations in the cycle (Slurm's ``scontrol create reservation``, ``flags=maint``).

A job's terms under the snapshot's reservations, worked out before it is admitted and placed:

- a job that asks for a reservation (``--reservation=NAME``) waits until it is active, then
  runs only on its nodes (Slurm: "jobs using that reservation can use only those resources");
- every other job keeps off the nodes of each reservation its time limit would cross: a job
  that ends before the window starts may use them (backfill fills the gap), one that would
  still run then may not (no limit: it would);
- every job keeps off the nodes where its user has no Unix account (``identity.py``), and
  waits with a Reason that says so when that is every node.

The terms are node exclusions (as ``-x``), so placement, backfill's reservation, preemption and
the reasons' probes all honour them unchanged. Step 6 then tells a job kept off reserved nodes
so, in plain words ("node-[3-6] reserved for maintenance from 02:00 UTC (in 3h 00m); your 8h 00m
time limit would cross it"), when those nodes are what it waits for.

Pure: the time is ``snap.now``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from random import Random
from typing import TYPE_CHECKING

from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason, ReasonCode, in_words
from gpufleet.model.reservation import NodeReservation
from gpufleet.scheduler.framework import PlacePlugin
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.request import Shape, shape_of
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.workspace import Workspace

if TYPE_CHECKING:
    from gpufleet.scheduler.decisions import Reasons

# the reasons a job kept off reserved nodes may have had from the cycle: what it waits for
# could be the reserved nodes
_REPLACEABLE = frozenset(
    {ReasonCode.NEVER, ReasonCode.RESOURCES, ReasonCode.GPU_MODEL, ReasonCode.TOPOLOGY}
)


def clock(t: float) -> str:
    """A time of day for a message (UTC: the controller's clients show local times from the
    Reason's data)."""
    return time.strftime("%H:%M", time.gmtime(t)) + " UTC"


def kept_off(r: NodeReservation, now: float, limit_s: float | None) -> Reason:
    """Why a job is kept off ``r``'s nodes, in plain words."""
    what = "maintenance" if r.maint else f"reservation {r.name}"
    if r.active(now):
        when = f"until {clock(r.end)} ({in_words(r.end - now)} more)"
        tail = ""
    else:
        when = f"from {clock(r.start)} (in {in_words(r.start - now)})"
        tail = (
            "; your job has no time limit, so it would cross it"
            if limit_s is None
            else f"; your {in_words(limit_s)} time limit would cross it"
        )
    code = ReasonCode.RESV_MAINT if r.maint else ReasonCode.RESV_NODES
    return Reason(
        code,
        f"{r.hostlist} reserved for {what} {when}{tail}",
        {"reservation": r.name, "nodes": r.hostlist, "start": r.start, "end": r.end},
        estimated_start=r.end,
        start_bound="planned",
    )


_SPEC_SLOTS = JobSpec.__slots__


def with_exclude(spec: JobSpec, exclude: tuple[str, ...]) -> JobSpec:
    """``replace(spec, exclude=exclude)`` without running its checks again (the spec was read
    and checked at submit; a per-job copy per cycle must be cheap)."""
    out = object.__new__(JobSpec)
    for name in _SPEC_SLOTS:
        object.__setattr__(out, name, getattr(spec, name))
    object.__setattr__(out, "exclude", exclude)
    return out


@dataclass(frozen=True, slots=True)
class _Terms:
    job: PendingJob | None  # the job as the cycle places it (None: it waits, ``why``)
    why: Reason | None = None
    barred: tuple[NodeReservation, ...] = ()  # the reservations it is kept off


class Windows:
    """The snapshot's reservations, as one cycle applies them job by job."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.now = snap.now
        self.by_name = {r.name: r for r in snap.reservations}
        self.live = [r for r in snap.reservations if r.end > snap.now]
        self.kept: dict[str, tuple[PendingJob, tuple[NodeReservation, ...]]] = {}
        self._names: tuple[str, ...] | None = None
        # the exclusions worked out, by (the job's own -x, the reservations it keeps off,
        # its own reservation, the nodes its user has no account on): jobs alike share one
        self._excludes: dict[
            tuple[tuple[str, ...], tuple[str, ...], str, tuple[str, ...]], tuple[str, ...]
        ] = {}
        self.accounts = snap.accounts or None
        self._users: dict[str, tuple[tuple[str, ...], Reason | None]] = {}

    def apply(self, job: PendingJob) -> tuple[PendingJob | None, Reason | None]:
        """``job`` with its terms as node exclusions, or (None, why it waits)."""
        t = self._terms(job)
        if t.barred and t.job is not None:
            self.kept[job.id] = (job, t.barred)
        return t.job, t.why

    def _terms(self, job: PendingJob) -> _Terms:
        spec, now = job.spec, self.now
        own: NodeReservation | None = None
        if spec.reservation:
            own = self.by_name.get(spec.reservation)
            why = self._not_yet(spec.reservation, spec.user, own)
            if why is not None:
                return _Terms(None, why)
        unowned: tuple[str, ...] = ()  # the nodes its user has no account on (identity.py)
        if self.accounts is not None:
            unowned, why = self._unowned(spec.user)
            if why is not None:
                return _Terms(None, why)
        limit = spec.time_limit_s
        barred = tuple(r for r in self.live if r is not own and r.crossed_by(now, limit))
        if not barred and own is None and not unowned:
            return _Terms(job)
        key = (spec.exclude, tuple(r.name for r in barred), own.name if own else "", unowned)
        exclude = self._excludes.get(key)
        if exclude is None:
            exclude = self._exclude(spec.exclude + unowned, barred, own)
            self._excludes[key] = exclude
        if exclude == spec.exclude:
            return _Terms(job)
        return _Terms(replace(job, spec=with_exclude(spec, exclude)), None, barred)

    def _exclude(
        self,
        given: tuple[str, ...],
        barred: tuple[NodeReservation, ...],
        own: NodeReservation | None,
    ) -> tuple[str, ...]:
        """The nodes a job keeps off: its own -x, the reservations it may not use, and every
        node outside its own reservation."""
        out: dict[str, None] = dict.fromkeys(given)
        for r in barred:
            out.update(dict.fromkeys(r.nodes))
        if own is not None:
            inside = set(own.nodes)
            out.update(dict.fromkeys(n for n in self._all_names() if n not in inside))
        return tuple(out)

    def _not_yet(self, name: str, user: str, own: NodeReservation | None) -> Reason | None:
        """Why a job that asks for reservation ``name`` cannot run in it now (None: it can)."""
        now = self.now
        if own is None or own.end <= now:
            gone = "no longer exists" if own is None else f"ended at {clock(own.end)}"
            return Reason(ReasonCode.NEVER, f"reservation {name} {gone}", {"reservation": name})
        if not own.admits(user):
            return Reason(
                ReasonCode.NEVER,
                f"reservation {name} is not for user {user} (its users: "
                f"{', '.join(own.users) or 'none'})",
                {"reservation": name},
            )
        if now < own.start:
            return Reason(
                ReasonCode.RESV_WAIT,
                f"waiting for reservation {name} to start at {clock(own.start)} "
                f"(in {in_words(own.start - now)})",
                {"reservation": name, "start": own.start},
                estimated_start=own.start,
                start_bound="reserved",
            )
        return None

    def _unowned(self, user: str) -> tuple[tuple[str, ...], Reason | None]:
        """The nodes ``user``'s jobs keep off (no account there, or not looked up yet), and
        why they wait when that is every node (once per user and cycle)."""
        got = self._users.get(user)
        if got is None:
            assert self.accounts is not None
            barred = self.accounts.barred(user)
            why = self.accounts.held(user, self._all_names()) if barred else None
            got = self._users[user] = (barred, why)
        return got

    def _all_names(self) -> tuple[str, ...]:
        if self._names is None:
            self._names = tuple(n.name for n in self.snap.nodes)
        return self._names

    def explain(self, reasons: Reasons, ws: Workspace, place: PlacePlugin, seed: int) -> None:
        """Step 6 for the jobs kept off reserved nodes that did not start: where the cycle's
        reason is about capacity and the job would have fitted on what is free now but for the
        reservations (or could never fit without their nodes), the reservation is the reason."""
        fits: dict[Shape, bool] = {}
        rng = Random(seed)
        for job_id, (job, barred) in self.kept.items():
            why = reasons.raw(job_id)
            if why is None or why.code not in _REPLACEABLE:
                continue
            if why.code is not ReasonCode.NEVER:
                k = shape_of(job.spec)
                if k not in fits:
                    fits[k] = place_gang(job.spec, ws.copy(), place, rng)[0] is not None
                if not fits[k]:
                    continue
            first = min(barred, key=lambda r: (r.start, r.name))
            reasons[job_id] = kept_off(first, self.now, job.spec.time_limit_s)
