"""Requests: each is put in the inbox and awaits its turn (``loop.py``), which answers it once
what it caused is committed. Also what only the store remembers (jobs that ended before this
process started, histories): the routers ask here, never the store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from gpufleet.core.events import (
    Event,
    JobAmend,
    JobCancelled,
    JobHold,
    JobRequeue,
    JobSignal,
    NodeDrain,
    QueueChanged,
)
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.queue import QueueSpec
from gpufleet.server.journal import AuditRow
from gpufleet.server.refusals import Invalid
from gpufleet.server.service.base import ServiceBase
from gpufleet.server.service.work import Work
from gpufleet.server.store import JobEvent, NewJob, NodeEventRecord, StoredJob, SubmitAudit


class Requests(ServiceBase):
    async def submit(self, jobs: list[NewJob], audit: SubmitAudit) -> list[str]:
        """Accept ``jobs`` durably (with ``audit``'s entry, in one transaction) and give
        their ids."""
        self.down.check()
        if audit.count != len(jobs):
            raise ValueError(f"the audit covers {audit.count} of {len(jobs)} jobs")
        for j in jobs:
            for _, dep in j.depends_on:
                await self.until_held(dep)
                if dep not in self.ctrl.jobs:
                    stored = self.store.job(dep)
                    if stored is None:
                        raise Invalid(f"depends_on: job {dep} does not exist")
                    # it ended before this process started (a restart loads only unfinished
                    # jobs): the core needs it to judge the dependency
                    self.ctrl.restore((), [stored.to_restored()])
        result: list[str] = await self._enqueue("submit", jobs, audit)
        return result

    async def unknown_jobs(self, ids: list[str], most: int) -> set[str]:
        """Those of ``ids`` that name no job, held or stored (a submission's dependencies,
        told at once), the first ``most`` of them: each is a look in the store, and 10,000
        made up ones held the controller 8 s."""
        missing: set[str] = set()
        for job_id in dict.fromkeys(ids):
            await self.until_held(job_id)
            if job_id not in self.ctrl.jobs and self.store.job(job_id) is None:
                missing.add(job_id)
                if len(missing) >= most:
                    break
        return missing

    async def until_held(self, job_id: str | None = None) -> None:
        """Returns once the core holds ``job_id`` (None: every job) if it was just accepted: a
        submission is answered after its acceptance commit, before the turn's step gives it
        to the core, so a request naming it (a dependency, a cancel, a show) or listing jobs
        that arrives in between waits for that step instead of missing it in memory."""
        while (job_id in self._unheld) if job_id is not None else self._unheld:
            await self._held.wait()

    async def event(self, ev: Event, audit: AuditRow | None = None) -> Any:
        """Handled in the next turn; returns once what it caused (and ``audit``) committed."""
        return await self._enqueue("event", ev, audit_row=audit)

    async def report(self, evs: Sequence[Event]) -> None:
        """An agent's reports: returns once the turn that handled them committed, so that the
        agent drops them only then (a turn whose commit failed must not lose an exit). One the
        core refuses (stale, unknown) is logged, not an error: resending cannot fix it."""
        self.down.check()
        loop = asyncio.get_running_loop()
        futs = []
        for ev in evs:
            fut: asyncio.Future[Any] = loop.create_future()
            self._inbox.append(Work("event", ev, fut, quiet=True))
            futs.append(fut)
        assert self._wake is not None
        self._wake.set()
        await asyncio.gather(*futs)

    async def _enqueue(
        self,
        kind: Literal["submit", "event"],
        payload: Any,
        audit: SubmitAudit | None = None,
        *,
        audit_row: AuditRow | None = None,
    ) -> Any:
        self.down.check()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inbox.append(Work(kind, payload, fut, audit, audit_row=audit_row))
        assert self._wake is not None
        self._wake.set()
        return await fut

    def post(self, ev: Event) -> None:
        """Fire and forget (a node's health, a service's load): handled in the next turn.
        Dropped while the store is down: the rebuild makes every agent register again, and its
        first heartbeat then reports its health anew."""
        if self.down:
            return
        self._inbox.append(Work("event", ev))
        if self._wake is not None:
            self._wake.set()

    # ----- users and admins ----------------------------------------------------------------

    async def update_queue(self, q: QueueSpec, audit: AuditRow) -> None:
        """An admin's change to a queue: stored first, with its audit entry (one transaction),
        then a core event: the next pass uses it."""
        self.down.check()
        self.store.put_queue(q, now=self.clock.now(), audit=audit)
        await self.event(QueueChanged(q))

    async def cancel(self, job_id: str, why: str, audit: AuditRow | None = None) -> None:
        await self.event(JobCancelled(job_id, why), audit)

    async def hold(self, job_id: str, held: str, why: str, audit: AuditRow | None = None) -> None:
        """Hold ("user", "admin") or release ("") a job (ADR 0074): kept by the store."""
        await self.event(JobHold(job_id, held, why), audit)

    async def amend(
        self, job_id: str, spec: JobSpec, why: str, audit: AuditRow | None = None
    ) -> None:
        """Change a job's spec (scontrol update, ADR 0076): kept by the store."""
        await self.event(JobAmend(job_id, spec, why), audit)

    async def requeue(self, job_id: str, why: str, audit: AuditRow | None = None) -> None:
        """Send a running job back to pending (scontrol requeue, ADR 0076)."""
        await self.event(JobRequeue(job_id, why), audit)

    async def signal(
        self, job_id: str, sig: int, scope: str, audit: AuditRow | None = None
    ) -> None:
        """A signal to a running job's processes, which it lives through (ADR 0078)."""
        await self.event(JobSignal(job_id, sig, scope), audit)

    async def drain(
        self,
        node: str,
        drain: bool,
        why: str,
        *,
        force: bool = False,
        requeue: bool = False,
        audit: AuditRow | None = None,
        deadline_s: float | None = None,
    ) -> None:
        drained = NodeDrain(node, drain, why, force, requeue=requeue, deadline_s=deadline_s)
        await self.event(drained, audit)

    # ----- what only the store remembers ---------------------------------------------------

    def next_job_id(self) -> str:
        """The id the next submission will take (not taken: sbatch --test-only prints it)."""
        return self.store.next_job_id()

    def stored_job(self, job_id: str) -> StoredJob | None:
        """The job as stored: one that ended before this process started is there only."""
        return self.store.job(job_id)

    def stored_jobs(
        self,
        *,
        user: str | None,
        queue: str | None,
        state: JobState | None,
        limit: int,
        max_seq: int,
    ) -> list[StoredJob]:
        """The stored jobs a listing asks for, newest first, up to job ``max_seq``."""
        return self.store.list_jobs(
            user=user, queue=queue, state=state, limit=limit, newest_first=True, max_seq=max_seq
        )

    def job_events(self, job_id: str) -> list[JobEvent]:
        return self.store.job_events(job_id)

    def node_events(self, name: str, limit: int) -> list[NodeEventRecord]:
        """The node's newest ``limit`` events, newest first."""
        return self.store.node_events(name, limit)
