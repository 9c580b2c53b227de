"""The JobMaster: every job's lifecycle, from submission to its end.

It launches gangs all or nothing, waits until every rank has started, stops the rest when one
fails, decides retries with exponential back-off, holds jobs back for their dependencies and
their array's throttle, and judges what a node reports about a task (current or stale). It
changes the cluster's state only through ``ClusterState``'s methods."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpufleet.core.commands import Command, Kill, Launch, SetTimer, Transition
from gpufleet.core.errors import ControllerError, UnknownObject
from gpufleet.core.events import (
    JobCancelled,
    JobSubmitted,
    TaskCheckpointed,
    TaskExited,
    TaskFenced,
    TaskStarted,
    TimerFired,
)
from gpufleet.core.events import TaskKey as Key
from gpufleet.core.jobbook import JobBook
from gpufleet.core.state import JobRecord
from gpufleet.core.state import RestoredJob as RestoredJob
from gpufleet.core.stops import Keys, stops_seen
from gpufleet.model.job import Job, JobState
from gpufleet.model.job_end import DEPENDENCY, NONE, JobEnd, ended_as
from gpufleet.model.notice import PREEMPT_GRACE_MAX_S, StopNotice, stop_notice
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.decisions import Preempt, Start

S = JobState
# endings whose run time says how long such a job runs (a cancel says what its user chose)
_RAN_OUT = frozenset({S.SUCCEEDED, S.TIMED_OUT, S.FAILED})

NO_REQUEUE = "node lost and the job asked not to be requeued (--no-requeue)"


class JobMaster(JobBook):
    """Every job's lifecycle: the events of jobs and tasks, and a scheduling pass's starts and
    preemptions, each turned into transitions and commands."""

    # ----- restart -----------------------------------------------------------------------

    def restore(self, jobs: Iterable[RestoredJob]) -> None:
        """The jobs as the store holds them: running attempts keep their allocations (on the
        nodes still known), pending ones queue again. Nothing is relaunched."""
        st = self.state
        for r in sorted(jobs, key=lambda r: r.seq):
            rec = JobRecord(
                r.job,
                r.seq,
                r.allocation,
                r.borrowing,
                depends_on=r.depends_on,
                array_id=r.array_id,
                array_limit=r.array_limit,
                array_index=r.array_index,
            )
            self.jobs[r.job.id] = rec
            self._deps.add(rec)
            if r.allocation:
                rec.ran_on[r.job.attempt] = tuple(p.node for p in r.allocation)
            self.seq = max(self.seq, r.seq)
            if r.job.state in (S.STARTING, S.RUNNING):
                for p in r.allocation:
                    if p.node in st.nodes:
                        st.take(p)
                st.run(rec.running_view())
                st.use(r.job.spec.queue, r.job.spec.total_resources)
                self._throttle_started(rec)
                if r.job.state is S.RUNNING:
                    rec.started_ranks = set(range(len(r.allocation)))
            elif r.job.state is S.PENDING:
                # its begin time holds across a restart (the spec is stored; its timer is not)
                r.job.eligible_time = max(r.job.eligible_time, r.job.spec.begin_time)
                self._enqueue(rec)

    # ----- events ------------------------------------------------------------------------

    def submit(self, ev: JobSubmitted, now: float, out: list[Command]) -> None:
        if ev.job_id in self.jobs:
            raise ControllerError(f"job {ev.job_id} exists already")
        for kind, dep in ev.depends_on:
            if kind not in ("afterok", "afterany"):
                raise ControllerError(f"unknown dependency type {kind!r} (afterok, afterany)")
            if dep not in self.jobs:
                raise ControllerError(f"dependency {dep} is not a known job")
        self.seq += 1
        rec = JobRecord(
            Job(ev.job_id, ev.spec, ev.submit_time, held="user" if ev.spec.hold else ""),
            self.seq,
            depends_on=ev.depends_on,
            oracle_duration_s=ev.oracle_duration_s,
            array_id=ev.array_id,
            array_limit=ev.array_limit if ev.array_id is not None else 0,
            array_index=ev.array_index if ev.array_id is not None else None,
        )
        self.jobs[ev.job_id] = rec
        self._deps.add(rec)
        if ev.spec.begin_time > now:  # sbatch --begin: eligible then (Reason BeginTime)
            rec.job.eligible_time = ev.spec.begin_time
            out.append(SetTimer(ev.spec.begin_time, "backoff", ev.job_id, rec.job.attempt))
        self.state.arrivals.arrived(ev.spec, now)  # the start plan's forecast of arrivals
        out.append(Transition(ev.job_id, 0, None, S.PENDING, now, "submitted"))
        rec.job.history.append((now, S.PENDING, "submitted"))
        if not self._dependency_dead(rec, now, out):
            self._enqueue(rec)  # a dependency never met: it waits with the Reason that says so

    def cancel(
        self, ev: JobCancelled, now: float, out: list[Command], waited: object = None
    ) -> None:
        """``waited``: its Reason if it waited, kept as Slurm does (with its unmet dependencies)."""
        rec = self.jobs.get(ev.job_id)
        if rec is None:
            raise UnknownObject(f"unknown job {ev.job_id}")
        st = rec.job.state
        if st is S.PENDING or (st in (S.PREEMPTED, S.NODE_LOST) and not rec.live_ranks()):
            self._dequeue(rec)
            self._to(rec, S.CANCELLED, now, ev.why, out)
            rec.job.end_time = now
            code = getattr(waited, "code", None) if st is S.PENDING else None
            rec.job.ended = JobEnd(str(code or NONE), dependency=self._deps.left(rec, self.jobs))
            self._finished(rec, now, out)
        elif st in (S.STARTING, S.RUNNING):
            self.stop(rec, S.CANCELLED, ev.why, out, now=now)
        elif st is S.FAILED and not rec.job.finished:
            self._dequeue(rec)
            rec.job.retries_used = rec.job.spec.max_retries
            rec.job.ended = ended_as(S.FAILED.value, rec.exit_status)
            self._finished(rec, now, out)

    def timer(self, ev: TimerFired, now: float, out: list[Command]) -> None:
        if ev.kind == "tick":
            self.state.dirty = True
            return
        rec = self.jobs.get(ev.job_id)
        if rec is None or rec.job.attempt != ev.attempt:
            return
        limit = ev.kind == "timelimit" and rec.job.limit_reached(now)  # not if raised since
        if limit and rec.job.state in (S.STARTING, S.RUNNING):
            self.stop(
                rec,
                S.TIMED_OUT,
                f"time limit {rec.job.spec.time_limit_s:g} s reached",
                out,
                now=now,
            )
        elif ev.kind == "backoff" and rec.job.state is S.PENDING:
            self.state.dirty = True
        elif ev.kind == "launch" and rec.job.state is S.STARTING:
            self._launch_overdue(rec, now, out)

    def _launch_overdue(self, rec: JobRecord, now: float, out: list[Command]) -> None:
        """The launch deadline passed with ranks that never started: an infrastructure fault
        (like a lost node: requeued, not charged). Their nodes become suspect; the ranks that
        did start are stopped, and the attempt ends once they have exited."""
        silent = [
            r
            for r in range(len(rec.allocation))
            if r not in rec.started_ranks and r not in rec.exited
        ]
        if not silent:
            return
        nodes = sorted({rec.allocation[r].node for r in silent})
        why = (
            f"rank(s) {silent} did not start within the launch deadline "
            f"({self.launch_timeout_s:g} s) on {', '.join(nodes)}"
        )
        for name in nodes:
            said = self.state.suspect(name, f"job {rec.id} attempt {rec.job.attempt}: {why}", now)
            if said is not None:
                out.append(said)
        for r in silent:  # never started: nothing there to wait for (the Kill makes sure)
            rec.exited[r] = -1
            self.state.free(rec.allocation[r])
        self.stop(rec, S.NODE_LOST, why, out, now=now)
        out.append(Kill(rec.id, rec.job.attempt, tuple(silent), "launch deadline passed"))
        if not rec.live_ranks():
            self.attempt_over(rec, now, out)
        self.state.dirty = True

    def task_started(self, ev: TaskStarted, now: float, out: list[Command]) -> None:
        if ev.node:  # its agent starts tasks: whatever made it suspect is over
            said = self.state.trust(
                ev.node, f"started a task ({ev.job_id} attempt {ev.attempt})", now
            )
            if said is not None:
                out.append(said)
        rec = self.jobs.get(ev.job_id)
        if rec is None or rec.job.attempt != ev.attempt or rec.job.state is not S.STARTING:
            return  # a stale attempt: the agent will be told to stop it by its lease
        rec.started_ranks.add(ev.rank)
        if len(rec.started_ranks) == len(rec.allocation) and rec.ending is None:
            self._to(rec, S.RUNNING, now, "every rank started", out)

    def task_exited(self, ev: TaskExited, now: float, out: list[Command]) -> None:
        rec = self.jobs.get(ev.job_id)
        if rec is None or rec.job.attempt != ev.attempt or ev.rank in rec.exited:
            return
        if rec.job.state not in (S.STARTING, S.RUNNING) or ev.rank >= len(rec.allocation):
            return
        rec.exited[ev.rank] = ev.exit_code
        rec.note_exit(ev.rank, ev.exit_code, ev.why)
        self.state.free(rec.allocation[ev.rank])
        self.state.dirty = True
        self._restate(rec)
        if rec.noticed and rec.live_ranks():
            # a rank is done with its notice (its checkpoint written, or it gave up): the
            # others wait for nothing more (a gang's ranks may block on the one that left)
            rec.noticed = False
            out.append(Kill(rec.id, rec.job.attempt, rec.live_ranks(), "preempted"))
        if rec.ending is None and ev.evicted:  # a stop this controller forgot (a restart)
            rec.ending, rec.ending_why = S.PREEMPTED, f"evicted before a restart: {ev.why}"
        if rec.ending is None:
            if rec.job.spec.batch:
                self._batch_rank_exited(rec, ev, now, out)
            elif ev.exit_code != 0:
                why = ev.why or f"rank {ev.rank} exited with code {ev.exit_code}"
                rec.failure = why
                self.stop(rec, S.FAILED, why, out, reason_kill="gang member failed", now=now)
        if not rec.live_ranks():
            self.attempt_over(rec, now, out)

    def _batch_rank_exited(
        self, rec: JobRecord, ev: TaskExited, now: float, out: list[Command]
    ) -> None:
        """A batch job's outcome is its script's, as Slurm's: rank 0 runs the script, and its
        exit ends the job (its code the job's); the step daemons of the other ranks are then
        stopped, which is no failure. A step daemon that ends by itself while the script runs
        fails the job, whatever its code, as a lost node does in Slurm."""
        if ev.rank == 0:
            if ev.exit_code == 0:
                self.stop(
                    rec,
                    S.SUCCEEDED,
                    "the batch script exited 0",
                    out,
                    "batch script ended",
                    now=now,
                )
                return
            why = ev.why or f"the batch script exited with code {ev.exit_code}"
            rec.failure = why
            self.stop(rec, S.FAILED, why, out, reason_kill="batch script failed", now=now)
            return
        node = rec.allocation[ev.rank].node
        how = ev.why or f"exited with code {ev.exit_code}"
        why = f"the step daemon of rank {ev.rank} on {node} ended while the batch script ran: {how}"
        rec.failure = why
        self.stop(rec, S.FAILED, why, out, reason_kill="a step daemon of the job ended", now=now)

    def task_fenced(self, ev: TaskFenced, now: float, out: list[Command]) -> None:
        """The node stopped the rank for its own sake: gone, as a reconcile would find."""
        if self.current_rank(ev.job_id, ev.attempt, ev.rank, ev.node) is None:
            return  # not the current attempt's, or not placed there: it changes nothing
        rec = self.jobs[ev.job_id]
        if ev.rank in rec.exited:
            return
        rec.exited[ev.rank] = -1
        self.state.free(rec.allocation[ev.rank])
        why = f"node {ev.node} no longer runs rank(s) [{ev.rank}]"
        self.stop(rec, S.NODE_LOST, f"{why}: {ev.why}" if ev.why else why, out, now=now)
        if not rec.live_ranks():
            self.attempt_over(rec, now, out)
        self.state.dirty = True

    def task_checkpointed(self, ev: TaskCheckpointed, now: float) -> None:
        """The job's checkpoint was written during this attempt: a preemption now loses only
        the work since (a file older than the attempt's start saves none of it)."""
        rec = self.jobs.get(ev.job_id)
        j = rec.job if rec is not None else None
        if rec is None or j is None or j.attempt != ev.attempt or j.start_time is None:
            return
        if j.state not in (S.STARTING, S.RUNNING):
            return
        at = min(now, now - max(0.0, ev.age_s))
        if at > j.start_time and (rec.checkpoint_time is None or at > rec.checkpoint_time):
            rec.checkpoint_time = at
            self._restate(rec)  # no pass for it: it frees nothing, it ranks the victims

    def attempts_seen(self, keys: Iterable[tuple[str, int, int]]) -> None:
        """Attempts a node ran (or runs) of jobs we hold pending at a lower attempt: our store
        was restored from a backup taken before they started. The job's next attempt is
        numbered past them, as its node would take a launch of the same number for a
        redelivery of what it ran, and drop it."""
        for job_id, attempt, _rank in keys:
            rec = self.jobs.get(job_id)
            if rec is not None and rec.job.state is S.PENDING and rec.job.attempt < attempt:
                rec.job.attempt = attempt

    def reconcile(
        self, now: float, node: str, running: Iterable[Key], out: list[Command], stopping: Keys = ()
    ) -> None:
        """The ranks the agent still runs: every rank the controller placed there that the
        agent does not run is gone (it never started, or ended while nobody listened): it
        counts as lost, and the job is requeued. Those it is stopping for an eviction that we
        knew nothing of (a restart): ``stops_seen``."""
        alive = set(running)
        for rec in self.jobs_on(node):
            lost = [
                rank
                for rank, p in enumerate(rec.allocation)
                if p.node == node
                and rank not in rec.exited
                and (rec.id, rec.job.attempt, rank) not in alive
            ]
            if not lost:
                continue
            for rank in lost:
                rec.exited[rank] = -1
                self.state.free(rec.allocation[rank])
            self.stop(rec, S.NODE_LOST, f"node {node} no longer runs rank(s) {lost}", out, now=now)
            if not rec.live_ranks():
                self.attempt_over(rec, now, out)
        stops_seen(self, stopping, now, out)
        self.state.dirty = True

    # ----- a scheduling pass's decisions -------------------------------------------------

    def start(self, st: Start, now: float, out: list[Command]) -> None:
        rec = self.jobs[st.job_id]
        if self.started is not None:
            rec.mark = self.started(rec.pending_view(), now)
        self._dequeue(rec)
        rec.nominated = False
        j = rec.job
        if st.queue and st.queue != j.spec.queue and st.queue in j.spec.queues:
            # a job of several queues (Slurm's -p a,b) runs in the one that admitted it: its
            # record's queue from now on (usage, accounting, squeue's b), until a requeue
            # lets it start in any of them again
            j.spec = replace(j.spec, queue=st.queue)
        j.attempt += 1
        j.start_time = now
        self.state.start_errors.started(rec.id, now)  # how its estimate came out
        rec.allocation = st.allocation
        rec.ran_on[j.attempt] = tuple(p.node for p in st.allocation)
        rec.borrowing = st.borrowing
        rec.started_ranks = set()
        rec.exited = {}
        rec.exit_status = None
        rec.ending = None
        rec.ending_why = ""
        rec.stopping_since = None
        rec.checkpoint_time = None
        rec.noticed = False
        for p in st.allocation:
            self.state.take(p)
        self._to(rec, S.STARTING, now, f"attempt {j.attempt}", out)
        out.append(Launch(j.id, j.attempt, st.allocation, rec.seq))
        if j.spec.time_limit_s is not None:
            out.append(SetTimer(now + j.spec.time_limit_s, "timelimit", j.id, j.attempt))
        if self.launch_timeout_s is not None:
            out.append(SetTimer(now + self.launch_timeout_s, "launch", j.id, j.attempt))
        self.state.run(rec.running_view())
        self.state.use(j.spec.queue, j.spec.total_resources)
        self._throttle_started(rec)

    def preempt(self, pre: Preempt, now: float, out: list[Command]) -> None:
        self.evict(self.jobs[pre.job_id], pre.reason, now, out, "preempted")
        self.nominate(pre.for_job)

    def nominate(self, job_id: str) -> None:
        preemptor = self.jobs.get(job_id)
        if preemptor is not None and not preemptor.nominated:
            preemptor.nominated = True  # the room being made is its: next cycles go first
            self._requeue_view(preemptor)

    def leaving(self, rec: JobRecord, now: float) -> None:
        """The attempt will stop soon (a service replica moved make-before-break, stopped
        once its replacement is ready): the scheduler counts its devices as freed, as for a
        stop under way, and takes it as no victim again."""
        if rec.stopping_since is None:
            rec.stopping_since = now
            self._restate(rec)

    def evict(
        self, rec: JobRecord, why: str, now: float, out: list[Command], kill: str = "drained"
    ) -> None:
        """Stop the running attempt for another's sake (a preemption, a drain's deadline): with
        the job's checkpoint notice under its queue's cap, requeued, not charged."""
        if rec.job.state not in (S.STARTING, S.RUNNING) or rec.ending is not None:
            return
        spec = rec.job.spec
        q = self.state.queues.get(spec.queue)
        cap = q.preempt_grace_max_s if q is not None else PREEMPT_GRACE_MAX_S
        notice = stop_notice(spec.preempt_notice, cap)
        if notice is not None:  # the job's history says what it was given
            why = f"{why} ({notice.describe()})"
        self.stop(rec, S.PREEMPTED, why, out, reason_kill=kill, now=now, notice=notice)

    # ----- an attempt's end --------------------------------------------------------------

    def stop(
        self,
        rec: JobRecord,
        ending: JobState,
        why: str,
        out: list[Command],
        reason_kill: str | None = None,
        *,
        now: float,
        notice: StopNotice | None = None,
    ) -> None:
        """End the attempt as ``ending`` once every live rank has been stopped. A cancel wins
        over an ending already under way (a failed rank, a preemption): the user asked for the
        job to stop, not to be retried or requeued. From now on the scheduler counts on its
        devices as freed now (a blocked job reserves them; nothing backfills ahead of it)."""
        if rec.ending is None or ending is S.CANCELLED:
            rec.ending = ending
            rec.ending_why = why
        if rec.stopping_since is None:
            rec.stopping_since = now
        live = tuple(r for r in rec.live_ranks())
        rec.noticed = notice is not None and bool(live)
        if live:
            why = reason_kill or ending.value.lower()
            out.append(Kill(rec.id, rec.job.attempt, live, why, notice))
        self._restate(rec)

    def _restate(self, rec: JobRecord) -> None:
        """The scheduler's view of a running attempt anew: only its live ranks hold devices
        (an exited rank's are free already, and must not be released twice by a reservation),
        and a stop under way ends it now."""
        if rec.live_ranks() and rec.id in self.state.running:
            self.state.restate(rec.running_view())

    def attempt_over(self, rec: JobRecord, now: float, out: list[Command]) -> None:
        j = rec.job
        ending = rec.ending or S.SUCCEEDED
        why = rec.ending_why or "every rank exited 0"
        ran = None if j.start_time is None else now - j.start_time
        if j.start_time is not None:
            j.attained_gpu_s += (now - j.start_time) * j.spec.total_gpu_milli / MILLI
            rec.mark = replace(rec.mark, stopped_at=now)
        self.state.unrun(j.id)
        self.state.unuse(j.spec.queue, j.spec.total_resources)
        if ending is S.NODE_LOST and not j.spec.requeue:
            # Slurm's --no-requeue: a node failure ends the job (NODE_FAIL there); here the
            # attempt failed, and only the retries the job asked for (max_retries) follow
            ending, why = S.FAILED, f"{NO_REQUEUE} ({why})"
        if rec.array_limit:
            self._refresh_views(self._throttle.stopped(rec.id))
        if j.state is S.STARTING and ending in (S.SUCCEEDED, S.TIMED_OUT):
            self._to(rec, S.RUNNING, now, "ranks started and ended together", out)
        self._to(rec, ending, now, why, out)
        rec.ending = None
        if ending is S.FAILED and j.retries_used < j.spec.max_retries:
            j.retries_used += 1
            delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (j.retries_used - 1))
            j.eligible_time = now + delay
            self._to(
                rec,
                S.PENDING,
                now,
                f"retry {j.retries_used} of {j.spec.max_retries} after {delay:g} s back-off",
                out,
            )
            out.append(SetTimer(j.eligible_time, "backoff", j.id, j.attempt))
            self._enqueue(rec)
        elif ending in (S.PREEMPTED, S.NODE_LOST):
            self._to(rec, S.PENDING, now, "requeued; not charged to the job's retries", out)
            self._enqueue(rec)
        else:
            j.end_time = now
            lost = ending is S.FAILED and why.startswith(NO_REQUEUE)
            j.ended = ended_as(ending.value, rec.exit_status, node_lost=lost)
            if ran is not None and ending in _RAN_OUT:  # what the run-time predictor learns
                self.state.history.record(j.spec, ran)
            if self.finished is not None:
                self.finished(j.spec, j.attained_gpu_s)
            self._finished(rec, now, out)

    def _finished(self, rec: JobRecord, now: float, out: list[Command]) -> None:
        self.state.start_errors.forget(rec.id)
        for dep_id in self._deps.dependents(rec):
            dep = self.jobs[dep_id]
            if dep.job.state is not S.PENDING:
                continue
            if self._dependency_dead(dep, now, out):
                self._finished(dep, now, out)
            else:
                self._requeue_view(dep)  # met now, or never: its Reason says which
        self.state.dirty = True

    def _dependency_dead(self, rec: JobRecord, now: float, out: list[Command]) -> bool:
        """Whether the pending job was just ended for an afterok dependency that can never be
        met: only under Slurm's ``kill_invalid_depend`` (``--kill-invalid-depend``, or the
        job's ``--kill-on-invalid-dep=yes``). Otherwise it stays pending, its Reason
        DependencyNeverSatisfied, until its user cancels it, as Slurm's default (ADR 0072)."""
        failed = self._deps.failed(rec, self.jobs) if self.kills_invalid(rec) else ""
        if failed:
            self._dequeue(rec)
            self._to(rec, S.CANCELLED, now, failed, out)
            rec.job.end_time, deps = now, self._deps.left(rec, self.jobs)  # Slurm keeps them
            rec.job.ended = JobEnd(DEPENDENCY, dependency=deps)
        return bool(failed)
