"""The JobMaster's book of jobs: every record by id, what a node's report about a task is
judged against (the current attempt and its placement), and each pending job's view in the
scheduler's queue (its dependencies and its array's throttle)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from gpufleet.core.arrays import ArrayThrottle
from gpufleet.core.cluster_state import ClusterState
from gpufleet.core.commands import Command, Launch, SetTimer, Signal, Transition
from gpufleet.core.dependencies import Dependencies
from gpufleet.core.errors import UnknownObject
from gpufleet.core.events import (
    JobAmend,
    JobCancelled,
    JobHold,
    JobRequest,
    JobRequeue,
    JobSignal,
)
from gpufleet.core.launch_env import ArrayFacts, JobFacts
from gpufleet.core.state import JobRecord
from gpufleet.model.allocation import Placement
from gpufleet.model.job import JobSpec, JobState
from gpufleet.scheduler.snapshot import PendingJob, ServiceMark

S = JobState
_HELD = (
    "held by its user: it starts once released (scontrol release)",
    "held by an admin: it starts once an admin releases it (scontrol release)",
)


class JobBook:
    def __init__(
        self,
        state: ClusterState,
        *,
        backoff_base_s: float,
        backoff_max_s: float,
        launch_timeout_s: float | None,
        started: Callable[[PendingJob, float], ServiceMark] | None = None,
        finished: Callable[[JobSpec, float], None] | None = None,
        kill_invalid_depend: bool = False,
    ) -> None:
        self.state = state
        # the order's mark for a job it starts (LAS' starvation rule); None: marks stay blank
        self.started = started
        # told each job's service as it ends for good (an order learning from history)
        self.finished = finished
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        # STARTING longer than this: requeued, the silent nodes suspect (None: no deadline;
        # the simulator's ranks start at once)
        self.launch_timeout_s = launch_timeout_s
        # Slurm's SchedulerParameters=kill_invalid_depend: a job whose dependency can never be
        # met is cancelled at once; off (Slurm's default): it waits, DependencyNeverSatisfied
        self.kill_invalid_depend = kill_invalid_depend
        self.jobs: dict[str, JobRecord] = {}
        self.seq = 0
        self._deps = Dependencies()
        self._throttle = ArrayThrottle()

    # ----- a task's judgement ------------------------------------------------------------

    def current_rank(
        self, job_id: str, attempt: int, rank: int, node: str | None = None
    ) -> Placement | None:
        """The placement of a rank of the job's current attempt while that attempt runs (on
        ``node``, if given); ``None``: a stale task (an older attempt, an ended job, another
        node's rank), which its node must stop."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.job.attempt != attempt:
            return None
        if rec.job.state not in (S.STARTING, S.RUNNING) or not 0 <= rank < len(rec.allocation):
            return None
        p = rec.allocation[rank]
        return p if node is None or p.node == node else None

    def placed_elsewhere(self, job_id: str, attempt: int, rank: int, node: str) -> str | None:
        """The node a rank of the job's current attempt is placed on, if that is not ``node``
        (an agent speaks only for its own node); ``None`` when it is, or when the report is
        about an attempt that is not the current one (it changes nothing)."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.job.attempt != attempt or not 0 <= rank < len(rec.allocation):
            return None
        placed = rec.allocation[rank].node
        return placed if placed != node else None

    def ran_on(self, job_id: str, attempt: int, rank: int) -> str | None:
        """The node that rank of that attempt was placed on, any attempt this process started
        or restored; ``None`` when it knows of no such rank."""
        rec = self.jobs.get(job_id)
        nodes = rec.ran_on.get(attempt) if rec is not None else None
        return nodes[rank] if nodes is not None and 0 <= rank < len(nodes) else None

    def deliverable(self, launch: Launch) -> Launch | None:
        """``launch`` as it still holds: ``None`` once a later attempt superseded it; without
        the ranks already counted as gone (a reconcile in the same step)."""
        rec = self.jobs.get(launch.job_id)
        if rec is None or rec.job.attempt != launch.attempt:
            return None
        gone = frozenset(r for r in rec.exited if 0 <= r < len(launch.allocation))
        if gone == launch.skip:
            return launch
        return Launch(launch.job_id, launch.attempt, launch.allocation, launch.seq, gone)

    def launch_facts(self, job_id: str) -> JobFacts:
        """What a launch's environment says of the job (``core.launch_env``). An array's
        indices are those of its tasks held in memory: after a restart, the ones still to run."""
        rec = self.jobs[job_id]
        array = None
        if rec.array_id is not None and rec.array_index is not None:
            tasks = (self.jobs[t] for t in self._deps.array_tasks(rec.array_id) if t in self.jobs)
            ix = sorted({t.array_index for t in tasks if t.array_index is not None})
            array = ArrayFacts(rec.array_id, rec.array_index, tuple(ix))
        return JobFacts.of(rec.job.spec, array)

    def jobs_on(self, node: str) -> list[JobRecord]:
        return [self.jobs[jid] for jid in self.state.running_on(node)]

    # ----- the scheduler's queue --------------------------------------------------------

    def kills_invalid(self, rec: JobRecord) -> bool:
        """Whether a dependency of the job's that can never be met ends it: the job's own
        ``--kill-on-invalid-dep``, else the controller's ``kill_invalid_depend``."""
        own = rec.job.spec.kill_invalid_dep
        return self.kill_invalid_depend if own is None else own

    def request(self, ev: JobRequest, now: float, out: list[Command], waited: object) -> None:
        """A user's request of a job: a cancel (``waited``: its Reason, if it waited), a hold."""
        if isinstance(ev, JobHold):
            self.hold(ev, now, out)
        elif isinstance(ev, JobAmend):
            self.amend(ev, now, out)
        elif isinstance(ev, JobRequeue):  # stopped as a preemption's: pending again, its id kept
            rec = self.jobs.get(ev.job_id)
            if rec is None:
                raise UnknownObject(f"unknown job {ev.job_id}")
            self.evict(rec, ev.why, now, out, "requeued")
        elif isinstance(ev, JobSignal):
            self.signal(ev, out)
        else:
            self.cancel(ev, now, out, waited)

    if TYPE_CHECKING:  # the JobMaster's; declared here for ``request`` only, no stubs

        def cancel(
            self, ev: JobCancelled, now: float, out: list[Command], waited: object = None
        ) -> None: ...

        def evict(
            self, rec: JobRecord, why: str, now: float, out: list[Command], kill: str = "drained"
        ) -> None: ...

    def signal(self, ev: JobSignal, out: list[Command]) -> None:
        """A signal to the ranks of a started job that still run (ADR 0078); nothing changes
        in its state, so nothing is written. A job not started (or ended) is left as it is."""
        rec = self.jobs.get(ev.job_id)
        if rec is None:
            raise UnknownObject(f"unknown job {ev.job_id}")
        if rec.job.state in (JobState.STARTING, JobState.RUNNING) and rec.live_ranks():
            out.append(Signal(rec.id, rec.job.attempt, rec.live_ranks(), ev.signal, ev.scope))

    def hold(self, ev: JobHold, now: float, out: list[Command]) -> None:
        """Hold or release a job (ADR 0074): kept with it (a transition to the state it is in,
        so that the store writes it and its history says it), and while it is pending its view
        waits on it, in its place by arrival. A job that ended is left as it is."""
        rec = self.jobs.get(ev.job_id)
        if rec is None:
            raise UnknownObject(f"unknown job {ev.job_id}")
        job = rec.job
        if job.finished or job.held == ev.held:
            return
        job.held = ev.held
        job.history.append((now, job.state, ev.why))
        out.append(Transition(rec.id, job.attempt, job.state, job.state, now, ev.why))
        if self.state.is_pending(rec.id):
            self._requeue_view(rec)
            self.state.dirty = True

    def amend(self, ev: JobAmend, now: float, out: list[Command]) -> None:
        """Its spec changed (ADR 0076): kept with it (a transition to the state it is in that
        says so, so that the store writes the spec); a pending job's view is made again for the
        next pass; a running one's time limit counts from its start. A job that ended is left
        as it is, and a started one changes only its name, time limit and priority (an admin's,
        or a nice; the API refuses the rest; a request that raced the job's start loses those)."""
        rec = self.jobs.get(ev.job_id)
        if rec is None:
            raise UnknownObject(f"unknown job {ev.job_id}")
        job = rec.job
        if job.finished:
            return
        pending = self.state.is_pending(rec.id)
        new = ev.spec
        if not pending:
            s = ev.spec
            new = replace(job.spec, name=s.name, time_limit_s=s.time_limit_s, priority=s.priority)
        if new == job.spec:
            return
        limit_changed = new.time_limit_s != job.spec.time_limit_s
        job.spec = new
        job.history.append((now, job.state, ev.why))
        out.append(Transition(rec.id, job.attempt, job.state, job.state, now, ev.why, True))
        if pending:
            self._requeue_view(rec)
            self.state.dirty = True
        elif rec.id in self.state.running:
            self.state.run(rec.running_view())  # its expected end moved with its time limit
            if limit_changed and new.time_limit_s is not None and job.start_time is not None:
                at = max(now, job.start_time + new.time_limit_s)
                out.append(SetTimer(at, "timelimit", job.id, job.attempt))
            self.state.dirty = True

    def _view(self, rec: JobRecord) -> PendingJob:
        """Its pending view: a hold first (as Slurm's JobHeldUser/JobHeldAdmin over its
        dependencies), then a dependency that can never be met (it waits until its user
        cancels it, as in Slurm), then an unmet one, else its array's throttle."""
        failed = self._deps.failed(rec, self.jobs)
        deps = self._deps.open(rec, self.jobs) if rec.depends_on else ()
        if rec.job.held:
            return rec.pending_view(_HELD[rec.job.held == "admin"], deps=deps, held=rec.job.held)
        if failed:
            return rec.pending_view(f"{failed}: it can never be met", never_met=True, deps=deps)
        unmet = self._deps.unmet(rec, self.jobs)
        if unmet or not rec.array_limit:
            return rec.pending_view(unmet, deps=deps)
        why = self._throttle.waiting(rec.id)
        return rec.pending_view(why, throttled=bool(why))

    def _throttle_started(self, rec: JobRecord) -> None:
        if rec.array_limit and rec.array_id is not None:
            self._refresh_views(self._throttle.started(rec.array_id, rec.array_limit, rec.id))

    def _refresh_views(self, job_ids: set[str]) -> None:
        """Tasks an array's throttle window moved past: their pending views change."""
        for job_id in job_ids:
            self._requeue_view(self.jobs[job_id])
        if job_ids:
            self.state.dirty = True

    def _enqueue(self, rec: JobRecord) -> None:
        if rec.array_limit and rec.array_id is not None:
            moved = self._throttle.queued(rec.array_id, rec.array_limit, rec.id, rec.seq)
            self._refresh_views(moved - {rec.id})
        self.state.put_pending(self._view(rec))
        self.state.dirty = True

    def _requeue_view(self, rec: JobRecord) -> None:
        if self.state.is_pending(rec.id):
            self.state.put_pending(self._view(rec))

    def _dequeue(self, rec: JobRecord) -> None:
        if self.state.unpend(rec.id) and rec.array_limit:
            self._refresh_views(self._throttle.unqueued(rec.id, rec.seq))

    def _to(
        self, rec: JobRecord, state: JobState, now: float, why: str, out: list[Command]
    ) -> None:
        old = rec.job.state
        rec.job.to(state, now, why)
        out.append(Transition(rec.id, rec.job.attempt, old, state, now, why))
