"""Group commit: a turn's submissions stored in one transaction (so a burst costs a few fsyncs,
not one each), and the events that give the core the jobs it does not hold yet.

A submission is "accepted" once stored: the loop answers it right after ``accept``, before
the turn's step hands the jobs to the core (``until_held`` bridges the gap)."""

from __future__ import annotations

import logging
from dataclasses import replace

from gpufleet.core.events import Event, JobSubmitted
from gpufleet.server.refusals import Conflict, Unavailable
from gpufleet.server.service.base import ServiceBase
from gpufleet.server.service.work import Work, fail, submit_audits
from gpufleet.server.store import NewJob, StoreError, StoreUnavailable

log = logging.getLogger("gpufleet.controller")


class Intake(ServiceBase):
    def _accept(self, submits: list[Work], now: float) -> list[Event]:
        """Store the submissions (one transaction); their JobSubmitted events, one per job the
        core does not hold yet (a retry with the same idempotency key gets the same ids)."""
        if not submits:
            return []
        known: set[str] = set()  # ids of jobs stored before, by an idempotency key
        try:
            batch = [
                replace(j, array_group=k) if j.array_index is not None else j
                for k, w in enumerate(submits)
                for j in w.payload
            ]  # each submission's array is its own
            ids_per = self.store.add_jobs(batch, now, audits=submit_audits(submits), known=known)
        except StoreError:  # nothing of the batch was stored: find the one(s) to blame
            known.clear()
            ids_per = self._add_one_by_one(submits, now, known)
        except StoreUnavailable:
            raise  # perhaps stored, perhaps not (a lost COMMIT): the store will say
        except Exception as e:
            log.exception("storing a batch of submissions failed")
            for w in submits:
                fail(w, Unavailable(f"could not store the jobs: {e}"))
            return []
        k = 0
        for w in submits:
            w.ids = ids_per[k : k + len(w.payload)]
            k += len(w.payload)
        self.down.committed()
        events: list[Event] = []
        for w in submits:
            w.events = self._new_to_core(w, now, known)
            events += w.events
        return events

    def _new_to_core(self, w: Work, now: float, known: set[str]) -> list[JobSubmitted]:
        """A stored submission's jobs that the core does not hold yet (``known``: the ids
        that existed before this batch; only those can have ended already)."""
        ids = w.ids or []
        head = ids[0] if ids else None  # the id of this submission's array
        out: list[JobSubmitted] = []
        for job_id, nj in zip(ids, w.payload, strict=True):
            if job_id in self.ctrl.jobs or (
                job_id in known and self._finished_before_start(job_id, nj)
            ):
                continue  # an idempotent retry: the job exists already
            array = nj.array_id or (head if nj.array_index is not None else None)
            out.append(
                JobSubmitted(
                    job_id,
                    nj.spec,
                    now,
                    nj.depends_on,
                    array_id=array,
                    array_limit=nj.array_limit or 0,
                    array_index=nj.array_index,
                )
            )
        return out

    def _finished_before_start(self, job_id: str, nj: NewJob) -> bool:
        """An idempotency key of a job that ended before this process started: the core does
        not hold it (a restart loads only unfinished jobs), and must not run it again. Only
        keyed jobs stored before (a retry) after a restart on a store with jobs pay this
        read: a new job cannot have ended (before, every keyed submission after a restart or
        a takeover paid one, on the loop)."""
        if nj.idempotency_key is None or not self._history:
            return False
        stored = self.store.job(job_id)
        return stored is not None and stored.finished

    def _add_one_by_one(self, submits: list[Work], now: float, known: set[str]) -> list[str]:
        """A batch the store refused (a reused idempotency key, a constraint): store each
        submission alone so only the bad one fails (its caller gets 409); the others keep
        their place in the batch."""
        ids: list[str] = []
        kept = []
        for w in submits:
            try:
                w.ids = self.store.add_jobs(
                    list(w.payload), now, audits=submit_audits([w]), known=known
                )
                ids += w.ids
                kept.append(w)
            except StoreError as e:
                fail(w, Conflict(str(e)))
        submits[:] = kept
        return ids
