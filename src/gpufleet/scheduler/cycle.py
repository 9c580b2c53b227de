"""One scheduling cycle over one snapshot, in the six numbered steps of DESIGN.md.

``run_cycle`` reads as the steps (as Kueue's ``schedule()``): each is one call on ``_Cycle``,
which holds what the cycle has learnt so far; backfill's reservation (``backfill``), preemption
(``preemption``) and the reasons (``explain``) live in modules of their own.

Pure: no I/O, no clock (``snap.now`` is the time), no threads. The same snapshot and profile
give the same decisions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from functools import cached_property
from itertools import chain
from random import Random

from gpufleet.model.allocation import Allocation
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import MILLI
from gpufleet.scheduler import backfill, explain, pack_encoders, preemption, slurm_words
from gpufleet.scheduler.admission import Tries, queue_tries
from gpufleet.scheduler.decisions import CycleResult, Preempt, Start
from gpufleet.scheduler.framework import ADMITTED, Admission, Code, Profile
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.never_fits import NeverFits, never_fits
from gpufleet.scheduler.queue_sharing import ShareTerms
from gpufleet.scheduler.request import Shape, shape_of
from gpufleet.scheduler.reservations import Windows
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage
from gpufleet.scheduler.workspace import Workspace

MAX_PREEMPTORS_PER_CYCLE = 4


def run_cycle(snap: Snapshot, profile: Profile) -> CycleResult:
    cycle = _Cycle(snap, profile)
    # 1. order: jobs nominated by an earlier preemption first (the room was made for them)
    jobs = cycle.ordered()
    # 2.-5. each job in order: admit, place, backfill past a blocked head, preempt
    cycle.walk(jobs)
    # 3'. the jobs that could start only by borrowing, in order, with what is left
    cycle.place_borrowers()
    # 6. explain
    return cycle.explained()


class _Cycle:
    """What one cycle works on (``ws``: what is free; ``usage``: each queue's use) and what it
    has decided (``res``) and learnt so far."""

    def __init__(self, snap: Snapshot, profile: Profile) -> None:
        self.snap, self.profile = snap, profile
        self.res = CycleResult(snap.cycle, snap.now)
        self.ws = snap.workspace.copy() if snap.workspace is not None else Workspace(snap.nodes)
        self.usage = QueueUsage.of(snap)
        profile.place.prepare(snap, self.ws)
        self.started: list[tuple[PendingJob, Allocation]] = []
        self.failed_shapes: set[tuple[Shape, bool]] = set()  # capacity only shrinks in a cycle
        self.victims_taken: set[str] = set()
        self.preempt_memo = preemption.PreemptMemo()
        self.never = NeverFits()
        self.preemptors = 0
        self.head: PendingJob | None = None  # the first job in order that could not start
        self.examined: set[str] = set()
        self.walked: list[PendingJob] = []  # the examined jobs in order (Slurm's words)
        self.unplaced: list[PendingJob] = []
        self.waiting: list[PendingJob] = []  # not yet eligible (dependency, back-off)
        # Jobs that could start only by borrowing wait until every job that fits its own quota
        # had its turn (as in Kueue): else a reclaimed borrower, requeued ahead in order, would
        # take back the very GPUs its lender just had freed, over and over.
        self.borrowers: list[PendingJob] = []
        # queues whose jobs need the admit plugin asked (all, unless it says otherwise)
        self.admit_all = not profile.admit.admits_unlimited
        self.whole_only, self.eligible = self._eligible()
        # per queue policy (None, True, False): the nodes that pack video jobs and the others
        self._pack_nodes: dict[bool | None, tuple[frozenset[int], frozenset[int]]] = {}
        # the advance reservations' terms (made when a job needs them: most cycles have none)
        self.windows: Windows | None = Windows(snap) if snap.reservations or snap.accounts else None
        # the queues' ways of sharing a GPU, as node exclusions (None: no queue has one)
        self.shares = ShareTerms.of(snap, self.ws.views)

    @cached_property
    def rng(self) -> Random:
        """The cycle's random numbers, seeded when first drawn (a full cluster's cycle mostly
        draws none): the same numbers as seeded at the start."""
        return Random(self.profile.seed * 1_000_003 + self.snap.cycle)

    def _eligible(self) -> tuple[bool, Sequence[PendingJob]]:
        """Whether every pending job wants whole GPUs (so a full cluster ends the walk), and
        the jobs that may start now; the others go to ``waiting``."""
        snap = self.snap
        index = snap.pending_index
        if index is not None and index.ready and snap.now >= 0:
            return index.whole_only, snap.pending  # every job is eligible: no look at each
        whole_only = True
        ready: list[PendingJob] = []
        for p in snap.pending:
            if whole_only:
                s = p.spec
                whole_only = s.gpus_per_worker > 0 and s.gpu_milli >= MILLI
            if p.waiting_for or p.eligible_time > snap.now:
                self.waiting.append(p)
            else:
                ready.append(p)
        return whole_only, ready

    # ----- 1. order ------------------------------------------------------------------------

    def ordered(self) -> Iterator[PendingJob]:
        snap, eligible = self.snap, self.eligible
        order = self.profile.order
        index = snap.pending_index
        rest: Iterable[PendingJob]
        if index is None or index.nominated:
            nominated = [p for p in eligible if p.nominated]
            rest = (p for p in order.order(eligible, snap, self.usage) if not p.nominated)
        else:  # none is nominated (the index counts them): no filter per job walked
            nominated = []
            rest = order.order(eligible, snap, self.usage)
        return chain(nominated, rest)

    # ----- the walk: steps 2 to 5 per job --------------------------------------------------

    def walk(self, jobs: Iterator[PendingJob]) -> None:
        # read once: the walk runs per examined job, a hundred or more a cycle when full
        max_depth, examined, ws = self.profile.max_depth, self.examined, self.ws
        may_pass = self.profile.backfill.backfill
        for job in jobs:
            if max_depth and len(examined) >= max_depth:
                break
            if self.head is not None and self.whole_only and ws.free_full == 0:
                break  # nothing left to place: the rest wait for resources
            examined.add(job.id)
            self.walked.append(job)
            if self.windows is not None or job.spec.reservation:
                termed = self.reserved_nodes(job)  # the reservations' terms, as exclusions
                if termed is None:
                    continue
                job = termed
            if job.spec.queues:  # Slurm's -p a,b: as the job of each of its queues
                if not self.walk_queues(job):
                    break  # nothing passes the blocked head
                continue
            if self.shares is not None and job.spec.queue in self.shares.queues:
                shared, why = self.shares.apply(job)  # its queue's nodes, ways of sharing
                if shared is None:
                    self.give(job, why)
                    continue
                job = shared
            job, adm = self.admit(job)  # 2.
            if adm is not ADMITTED and adm.status.code is not Code.SUCCESS:  # runs per job
                self.refused(job, adm)
                continue
            if self.head is not None:  # 4. may it start around the blocked head?
                passing = may_pass(job, self.head)
                if passing.code is not Code.SUCCESS:
                    self.give(job, passing.reason)
                    break  # nothing passes the blocked head
            if adm.borrowing:
                self.borrowers.append(job)
                continue
            if self.place(job, adm) or self.preempt(job, adm):  # 3., else 5.
                continue
            self.block(job)  # 4. the first such job becomes the head, with its reservation

    def walk_queues(self, job: PendingJob) -> bool:
        """Steps 2 to 5 for a job of several queues: started as the job of the first of them
        that admits it without borrowing and has room on its nodes, else preempting as the
        job of the first that admits it and has victims on its nodes (as Slurm tries each
        partition of the job's list); else, when one admits it by borrowing, it waits for
        step 3' (as a borrower does), else it blocks, waiting for a node of any of them.
        False: the job may not pass the blocked head, and the walk ends."""
        tries = self.tries(job)
        if tries.why is not None:
            self.refused(job, tries.why)
            return True
        if self.head is not None:  # 4. may it start around the blocked head?
            passing = self.profile.backfill.backfill(job, self.head)
            if passing.code is not Code.SUCCESS:
                self.give(job, passing.reason)
                return False
        if not tries.direct:
            self.borrowers.append(job)
            return True
        if any(self.place(as_q, adm) for as_q, adm in tries.direct):  # 3.
            return True
        if any(self.preempt(as_q, adm) for as_q, adm in tries.direct):  # 5.
            return True
        if tries.borrowing:  # another of its queues may start it by borrowing, in step 3'
            self.borrowers.append(job)
            return True
        self.block(self.waits_for_any(job, tries.direct))  # 4.
        return True

    def tries(self, job: PendingJob) -> Tries:
        """``job`` as the job of each of its queues that admits it, that queue's terms on."""
        shares = self.shares

        def terms(as_q: PendingJob) -> tuple[PendingJob | None, Reason | None]:
            if shares is None or as_q.spec.queue not in shares.queues:
                return as_q, None
            return shares.terms(as_q)[:2]

        return queue_tries(job, self.profile.admit, self.usage, self.admit_all, terms)

    def waits_for_any(
        self, job: PendingJob, tried: Sequence[tuple[PendingJob, Admission]]
    ) -> PendingJob:
        """A job of several queues none of which has room for it now, as it waits (for its
        Reason, the head's reservation): for a node of any of ``tried``."""
        if self.shares is None:
            return tried[0][0]
        return self.shares.union(job, [as_q for as_q, _ in tried])

    def reserved_nodes(self, job: PendingJob) -> PendingJob | None:
        """``job`` kept off the nodes of the reservations it may not use (or held to its own
        one's); None: it waits for its reservation, with why."""
        if self.windows is None:
            self.windows = Windows(self.snap)
        termed, why = self.windows.apply(job)
        if termed is None:
            self.give(job, why)
        return termed

    # ----- 2. admit ------------------------------------------------------------------------

    def admit(self, job: PendingJob) -> tuple[PendingJob, Admission]:
        """The admission of a job of one queue."""
        if not self.admit_all and job.spec.queue not in self.usage.limited:
            return job, ADMITTED
        return job, self.profile.admit.admit(job, self.usage)

    def refused(self, job: PendingJob, adm: Admission) -> None:
        self.give(job, adm.status.reason)

    def give(self, job: PendingJob, reason: Reason | None) -> None:
        if reason is not None:
            self.res.reasons[job.id] = reason

    # ----- 3. place ------------------------------------------------------------------------

    def place(self, job: PendingJob, adm: Admission) -> bool:
        """Start ``job`` where the place plugin puts it, or leave it unplaced (False)."""
        s, ws, res = job.spec, self.ws, self.res
        if (
            s.gpus_per_worker
            and s.gpu_milli >= MILLI
            and s.workers * s.gpus_per_worker > ws.free_full
        ):
            # place_gang's own first test (no state, no random number), without the shape key:
            # a full cluster sends most jobs here, and free devices only go within a cycle
            return False
        limit = s.time_limit_s
        long = res.reservation is not None and (
            limit is None or self.snap.now + limit > res.reservation.start_time
        )
        ws.fence = long  # long jobs keep off the head's reserved devices, CPUs and memory
        key = (shape_of(s), long)
        alloc = None
        if key not in self.failed_shapes:
            alloc, _ = place_gang(s, ws, self.profile.place, self.rng)
            if alloc is None:
                self.failed_shapes.add(key)
        ws.fence = False
        if alloc is None and pack_encoders.video_job(s) and (on := self._packing(s.queue)[0]):
            started = ((j.id, j.spec, a) for j, a in self.started)
            alloc = pack_encoders.pack(s, self.snap, ws, started, on)  # beside training
        if alloc is None:
            return False
        res.starts.append(Start(job.id, alloc, adm.borrowing, s.queue))
        self.usage.add(s.queue, s.total_resources)
        self.started.append((job, alloc))
        return True

    # ----- 5. preempt ----------------------------------------------------------------------

    def preempt(self, job: PendingJob, adm: Admission) -> bool:
        """Stop the fewest running jobs that let ``job`` start once they have ended; hold the
        nodes it will take for it. False when preemption is off, spent or finds no victims."""
        profile, memo = self.profile, self.preempt_memo
        if not profile.preempt or self.preemptors >= MAX_PREEMPTORS_PER_CYCLE:
            return False
        if len(profile.preempt) == 1:
            # the one plugin's victims_key, asked here first: a job whose key is known to have
            # no candidates left skips the search (a full LAS cluster sends most jobs here,
            # and those of its last level outrank nobody)
            keyer = preemption.victims_keys(profile, memo)[0]
            if keyer(job, adm, self.snap, self.usage, profile.order) in memo.none_for:
                return False
        chosen = preemption.preempt(
            job, adm, self.snap, self.usage, self.ws, profile, self.rng, self.victims_taken, memo
        )
        if not chosen:
            return False
        self.preemptors += 1
        said = next(
            (r for p in profile.preempt if (r := p.reason_for(job, chosen, self.snap)) is not None),
            None,
        )
        domain = "" if said is None else str(said.data.get("leaf", ""))
        for v in chosen:
            self.victims_taken.add(v.id)
            why = (
                preemption.why(v, job, self.usage)
                if said is None
                else f"for job {job.id}: {said.message}"
            )
            self.res.preemptions.append(Preempt(v.id, job.id, why, domain))
        self.res.reasons[job.id] = explain.preempting(job, chosen) if said is None else said
        preemption.hold_for(job, chosen, self.ws, profile, self.rng)
        if self.head is None:
            self.head = job
        return True

    # ----- 4. backfill: the head and its reservation ---------------------------------------

    def block(self, job: PendingJob) -> None:
        """``job`` could not start: the first such job that fits somewhere some day becomes
        the head, with a reservation where the backfill plugin keeps one."""
        self.unplaced.append(job)
        if self.head is None and not never_fits(job, self.snap, self.profile, self.never):
            self.head = job
            if self.profile.backfill.reserves:
                self.res.reservation = backfill.reserve(
                    job, self.ws, self.snap, self.started, self.profile, self.rng
                )

    # ----- 3'. the borrowers ---------------------------------------------------------------

    def place_borrowers(self) -> None:
        admit, usage = self.profile.admit, self.usage
        for job in self.borrowers:
            if job.spec.queues:
                self.place_borrower_of_queues(job)
                continue
            adm = admit.admit(job, usage)  # the cohort's idle quota may be gone by now
            if not adm.status.ok:
                self.refused(job, adm)
                continue
            if self.head is not None:
                passing = self.profile.backfill.backfill(job, self.head)
                if passing.code is not Code.SUCCESS:
                    self.give(job, passing.reason)
                    continue
            if not self.place(job, adm):
                self.unplaced.append(job)

    def place_borrower_of_queues(self, job: PendingJob) -> None:
        """Step 3' for a job of several queues: as the job of the first that admits it now
        (by borrowing or not: another may lend by now) and has room on its nodes."""
        tries = self.tries(job)
        if tries.why is not None:
            self.refused(job, tries.why)
            return
        if self.head is not None:
            passing = self.profile.backfill.backfill(job, self.head)
            if passing.code is not Code.SUCCESS:
                self.give(job, passing.reason)
                return
        tried = tries.direct + tries.borrowing
        if not any(self.place(as_q, adm) for as_q, adm in tried):
            self.unplaced.append(self.waits_for_any(job, tried))

    # ----- 6. explain ----------------------------------------------------------------------

    def explained(self) -> CycleResult:
        res = self.res
        res.examined = len(self.examined)
        res.free_whole_gpus = self.ws.free_full
        if self.profile.explain:
            explain.explain_all(
                self.snap,
                self.profile,
                self.usage,
                self.ws,
                res,
                self.examined,
                self.unplaced,
                self.waiting,
                self.head,
                self.rng,
            )
            if self.windows is not None:
                self.windows.explain(res.reasons, self.ws, self.profile.place, self.snap.cycle)
            explain.moving(self.snap, res)
            self._kept_apart()
            self._shares_said()
            self._slurm_words()
        return res

    def _slurm_words(self) -> None:
        """Slurm's word where a job's place in the walk makes it other than its code's
        (``Priority`` behind a job of its queue that waits; scheduler/slurm_words.py)."""
        words = slurm_words.SlurmWords(self.snap)
        started = set(self.res.started_ids)
        words.walked(self.walked, self.res.reasons, started)
        skip = started | self.examined
        self.res.reasons.reword_rest(words.rest(self.profile, self.usage, skip.__contains__))

    def _queue_packs(self, queue: str) -> bool | None:
        q = self.snap.queues.get(queue)
        return None if q is None else q.pack_encoders

    def _packing(self, queue: str) -> tuple[frozenset[int], frozenset[int]]:
        """The nodes that pack a video job of ``queue`` beside training and those that do not
        (the flag, each pool's label and the queue's policy), worked out when a video job of
        such a policy first needs them."""
        policy = self._queue_packs(queue)
        got = self._pack_nodes.get(policy)
        if got is None:
            got = self._pack_nodes[policy] = pack_encoders.nodes(
                self.ws, self.profile.pack_encoders, policy
            )
        return got

    def _kept_apart(self) -> None:
        """A waiting video job that packing would have placed beside training is told so."""
        for job in self.unplaced:
            s = job.spec
            if not pack_encoders.video_job(s):
                continue
            on, off = self._packing(s.queue)
            # raw: a read with the estimated start would play the whole queue forward each
            # pass (StartPlan), only to add a sentence; the estimate is added when read
            r = self.res.reasons.raw(job.id)
            if r is None:
                continue
            policy = self._queue_packs(s.queue)
            said = pack_encoders.kept_apart(s, self.snap, self.ws, off, policy, on)
            if said:
                self.res.reasons[job.id] = replace(r, message=r.message + said)

    def _shares_said(self) -> None:
        """A waiting job kept off nodes by its queue's node set or ways of sharing is told so."""
        shares = self.shares
        if shares is None or not (shares.kept or shares.held or shares.union_held):
            return
        for job in self.unplaced:
            union = job.id in shares.union_held
            kept = union or job.id in shares.kept or job.id in shares.held
            r = self.res.reasons.raw(job.id) if kept else None
            if r is not None and union:
                self.res.reasons[job.id] = shares.said_union(r, job.id)
            elif r is not None:
                self.res.reasons[job.id] = shares.said(r, job.id, job.spec.queue)


__all__ = ["Reason", "ReasonCode", "run_cycle"]
