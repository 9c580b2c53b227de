"""A full disk under the store and under the controller service, in-process: a real SQLite
file on a real tmpfs that the test fills. What fails is an outage (503, retry), never a
refusal (409) or a 500; a turn whose commit failed leaves memory as the store is."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaoshelp import Tmpfs, need_root

from gpufleet.base.clock import ManualClock
from gpufleet.model.job import JobSpec, JobState
from gpufleet.scheduler.framework import Profile
from gpufleet.server.logs import LogStore
from gpufleet.server.service import ControllerService, RequestError
from gpufleet.server.store import NewJob, Store, StoreUnavailable, SubmitAudit, sqlite_url

T0 = 1_700_000_000.0
SPEC = JobSpec("one", "alice", "default", gpus_per_worker=1)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Tmpfs]:
    need_root()
    d = Tmpfs(tmp_path / "disk", 8)
    try:
        yield d
    finally:
        d.close()


def jobs(n: int) -> list[NewJob]:
    return [NewJob(SPEC) for _ in range(n)]


def test_a_full_disk_is_an_outage_not_a_refusal_and_reads_go_on(disk: Tmpfs) -> None:
    with Store.open(sqlite_url(disk.where)) as store:
        (first,) = store.add_jobs(jobs(1), T0)
        disk.fill()
        with pytest.raises(StoreUnavailable, match="disk is full"):
            store.add_jobs(jobs(50), T0)
        with pytest.raises(StoreUnavailable):
            store.probe()  # a full disk does not take writes: the controller stays down
        assert [j.id for j in store.list_jobs()] == [first]  # nothing half-stored
        disk.free()
        store.probe()
        assert len(store.add_jobs(jobs(50), T0)) == 50


def test_a_cancel_whose_commit_failed_answers_503_and_memory_keeps_the_stores_state(
    disk: Tmpfs, tmp_path: Path
) -> None:
    store = Store.open(sqlite_url(disk.where))
    svc = ControllerService(
        store,
        Profile.build(),
        ManualClock(T0),
        logs=LogStore(tmp_path / "logs"),
        min_pass_gap_s=0.0,  # the clock stands still: no gap to wait between passes
    )

    async def run() -> None:
        await svc.start()
        try:
            (job,) = await svc.submit(jobs(1), SubmitAudit("alice", "user", 1, "one"))
            disk.fill()
            audit = ("root", "admin", "job.cancel", job, {})
            with pytest.raises(RequestError) as e:
                await svc.cancel(job, "cancelled by admin:root", audit)
            assert e.value.status == 503
            assert svc.down and job not in svc.ctrl.jobs  # memory holds nothing uncommitted
            with pytest.raises(StoreUnavailable):  # while down: at once, without a turn
                await svc.submit(jobs(1), SubmitAudit("alice", "user", 1, "one"))
            stored = store.job(job)
            assert stored is not None and stored.state is JobState.PENDING
            disk.free()
            end = time.monotonic() + 30
            while svc.down:  # the rebuild's back-off is real time
                assert time.monotonic() < end, svc.down.why
                await asyncio.sleep(0.05)
            assert svc.ctrl.jobs[job].job.state is JobState.PENDING  # as the store says
            await svc.cancel(job, "cancelled by admin:root", audit)
            assert svc.ctrl.jobs[job].job.state is JobState.CANCELLED
        finally:
            await svc.stop()

    try:
        asyncio.run(run())
        stored = store.job(job_id := next(iter(j.id for j in store.list_jobs())))
        assert stored is not None and stored.state is JobState.CANCELLED
        # the cancel and its audit entry committed together, once
        cancels = [a for a in store.audit_log(limit=None) if a.action == "job.cancel"]
        assert [a.target for a in cancels] == [job_id]
    finally:
        store.close()
