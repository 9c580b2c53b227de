"""After the controller rebuilt its memory from the store, an agent it answered before keeps its
lease until its registration commits, even when the store refuses that registration's writes.

Seen in CI (tests/chaos/test_store_faults.py, the disk-full case, once in three runs): SQLite on
a full disk still commits a transaction whose pages fit in the WAL it already has, so the
rebuild's probe passed while the registrations that follow a rebuild failed; the agents'
heartbeats were refused (409, "register again"), their leases ran out, the watchdog killed a
task the rebuilt memory rightly held as running, and its job ran a second attempt.

A real SQLite store and the real service, in-process; the store refuses the writes a full disk
refused (the node's row, a turn's commit) and takes the probe, as that disk did."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.model.job import JobSpec, JobState
from gpufleet.scheduler.framework import Profile
from gpufleet.server.logs import LogStore
from gpufleet.server.routers.agent import node_spec
from gpufleet.server.service import ControllerService, RequestError
from gpufleet.server.store import NewJob, Store, StoreUnavailable, SubmitAudit, sqlite_url

T0 = 1_700_000_000.0
CANCEL_AUDIT = ("root", "admin", "job.cancel", "1", {})  # commits with its change
FULL = "the database is unavailable: database or disk is full"


class FullDiskStore(Store):
    """A real store whose disk is full for writes larger than the WAL's spare room: the
    probe passes, a node's row and a turn's transitions do not."""

    full = False

    def upsert_node(self, *a: Any, **kw: Any) -> Any:
        if self.full:
            raise StoreUnavailable(FULL)
        return super().upsert_node(*a, **kw)

    def apply_transitions(self, *a: Any, **kw: Any) -> Any:
        if self.full:
            raise StoreUnavailable(FULL)
        return super().apply_transitions(*a, **kw)


def registration(node: str, running: list[s.TaskRef]) -> s.AgentRegister:
    return s.AgentRegister(
        node=node,
        address="127.0.0.1",
        gpu_model="H100-SXM",
        gpus=[
            s.GpuInfo(index=i, uuid=f"GPU-{node}-{i}", model="H100-SXM", memory_mib=81559)
            for i in range(8)
        ],
        cpu_cores=64,
        memory_gib=256,
        running=running,
    )


async def until(what: str, ok: Any, timeout_s: float = 30.0) -> None:
    """The rebuild's back-off is the service's real time (asyncio), not the ManualClock."""
    end = time.monotonic() + timeout_s
    while not ok():
        assert time.monotonic() < end, f"timed out waiting for: {what}"
        await asyncio.sleep(0.02)


def test_a_rebuilt_controller_keeps_an_agents_lease_until_its_registration_commits(
    tmp_path: Path,
) -> None:
    store = FullDiskStore.open(sqlite_url(tmp_path / "db"))
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
            await svc.register(registration("node-0", []), node_spec(registration("node-0", [])))
            spec = JobSpec("victim", "alice", "default", gpus_per_worker=1)
            (job,) = await svc.submit([NewJob(spec)], SubmitAudit("alice", "user", 1, "victim"))
            await svc.until_held(job)  # answered once stored; held after the turn's step
            await until("launched", lambda: svc.ctrl.jobs[job].job.state is JobState.STARTING)
            await svc.agent_events(
                "node-0", [s.AgentEvent(kind="started", job=job, attempt=1, rank=0)]
            )
            assert svc.ctrl.jobs[job].job.state is JobState.RUNNING
            task = s.TaskRef(job=job, attempt=1, rank=0)
            beat = s.Heartbeat(running=[task])

            store.full = True  # a turn's commit fails: the controller rebuilds from the store
            with pytest.raises(RequestError) as e:
                await svc.cancel(job, "cancelled by admin:root", CANCEL_AUDIT)
            assert e.value.status == 503
            assert svc.heartbeat("node-0", beat).stale == []  # down: the lease goes on
            await until("rebuilt (the probe passes)", lambda: not svc.down)
            assert svc.ctrl.jobs[job].job.state is JobState.RUNNING  # as the store says

            # the rebuilt controller asks the agent to register again, and keeps its lease
            hb = svc.heartbeat("node-0", beat)
            assert hb.register_again and hb.stale == [] and hb.lease_s == svc.lease_s
            again = registration("node-0", [task])
            for _ in range(3):  # the disk refuses the registration: nothing changes
                with pytest.raises(StoreUnavailable):
                    await svc.register(again, node_spec(again))
                hb = svc.heartbeat("node-0", beat)
                assert hb.register_again and hb.stale == []
            node = svc.ctrl.nodes["node-0"]
            assert not node.lost and svc.ctrl.jobs[job].job.attempt == 1

            store.full = False
            await svc.register(again, node_spec(again))
            hb = svc.heartbeat("node-0", beat)
            assert not hb.register_again and hb.stale == []  # registered: heartbeats as usual
            rec = svc.ctrl.jobs[job]
            assert rec.job.state is JobState.RUNNING and rec.job.attempt == 1  # never rerun
        finally:
            await svc.stop()

    try:
        asyncio.run(run())
    finally:
        store.close()


def test_an_agent_unknown_before_the_rebuild_must_register_first(tmp_path: Path) -> None:
    """Only agents this process answered before keep a lease without registering: one that
    was not registered (or whose registration never committed) hears 409 as before."""
    store = FullDiskStore.open(sqlite_url(tmp_path / "db"))
    svc = ControllerService(
        store, Profile.build(), ManualClock(T0), logs=LogStore(tmp_path / "logs")
    )

    async def run() -> None:
        await svc.start()
        try:
            store.full = True
            reg = registration("node-1", [])
            with pytest.raises(StoreUnavailable):
                await svc.register(reg, node_spec(reg))
            with pytest.raises(RequestError) as e:  # no lease for an agent never registered
                svc.heartbeat("node-1", s.Heartbeat())
            assert e.value.status == 409 and "register again" in str(e.value)
        finally:
            await svc.stop()

    try:
        asyncio.run(run())
    finally:
        store.close()
