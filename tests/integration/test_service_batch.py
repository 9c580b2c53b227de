"""The controller service's group commit: submissions that share a turn (one transaction)
keep what each asked for. Driven in-process on a real store (SQLite and PostgreSQL), the
service's own loop on asyncio, time from a ManualClock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gpufleet.core.clock import ManualClock
from gpufleet.model.job import JobSpec
from gpufleet.scheduler.framework import Profile
from gpufleet.server.logs import LogStore
from gpufleet.server.service import ControllerService, RequestError
from gpufleet.server.store import NewJob, Store, SubmitAudit

T0 = 1_700_000_000.0


def array(name: str, n: int) -> list[NewJob]:
    spec = JobSpec(name, "alice", "default", gpus_per_worker=1)
    return [NewJob(spec, array_index=i) for i in range(n)]


def test_two_arrays_submitted_in_one_turn_are_two_arrays(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    svc = ControllerService(
        store, Profile.build(), ManualClock(T0), logs=LogStore(tmp_path / "logs")
    )
    batches: list[int] = []  # the size of each add_jobs transaction
    add_jobs = store.add_jobs

    def counted(new: list[NewJob], *args: Any, **kw: Any) -> list[str]:
        batches.append(len(new))
        return add_jobs(new, *args, **kw)

    store.add_jobs = counted  # type: ignore[method-assign]

    async def run() -> tuple[list[str], list[str]]:
        await svc.start()
        try:
            # both are queued before the loop takes its next batch: one turn, one transaction
            a, b = await asyncio.gather(
                svc.submit(array("a", 3), SubmitAudit("alice", "user", 3, "a")),
                svc.submit(array("b", 2), SubmitAudit("alice", "user", 2, "b")),
            )
            return a, b
        finally:
            await svc.stop()

    try:
        a, b = asyncio.run(run())
        stored = {j.id: j for j in store.list_jobs(limit=None)}
        assert [stored[i].array_id for i in a] == [a[0]] * 3
        assert [stored[i].array_id for i in b] == [b[0]] * 2
        assert [stored[i].array_index for i in a + b] == [0, 1, 2, 0, 1]
        assert batches == [5]  # they did share a transaction
    finally:
        store.close()


def test_a_submission_the_store_refuses_fails_alone(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    svc = ControllerService(
        store, Profile.build(), ManualClock(T0), logs=LogStore(tmp_path / "logs")
    )
    spec = JobSpec("one", "alice", "default", gpus_per_worker=1)
    bad = NewJob(spec, idempotency_key="k" * 201)  # longer than the store keeps

    async def run() -> list[Any]:
        await svc.start()
        try:
            return await asyncio.gather(
                svc.submit([NewJob(spec)], SubmitAudit("alice", "user", 1, "one")),
                svc.submit([bad], SubmitAudit("alice", "user", 1, "bad")),
                svc.submit(array("a", 2), SubmitAudit("alice", "user", 2, "a")),
                return_exceptions=True,
            )
        finally:
            await svc.stop()

    try:
        first, refused, third = asyncio.run(run())
        assert isinstance(refused, RequestError) and refused.status == 409
        assert "idempotency_key must be 1 to 200 characters" in str(refused)
        assert sorted(j.id for j in store.list_jobs(limit=None)) == sorted(first + third)
        assert [a.detail["name"] for a in store.audit_log(limit=None)] == ["one", "a"]
    finally:
        store.close()


class PassClock:
    """A monotonic clock that moves only while the core schedules: each pass costs ``cost``."""

    def __init__(self, cost: float) -> None:
        self.t, self.cost = 100.0, cost

    def __call__(self) -> float:
        return self.t


def passes_per_turn(db_url: str, tmp_path: Path, cost: float) -> tuple[int, int]:
    """Submissions in 6 turns of their own: how many turns and scheduling passes ran."""
    store = Store.open(db_url)
    mono = PassClock(cost)
    svc = ControllerService(
        store,
        Profile.build(),
        ManualClock(T0),  # never reaches the interval's tick
        logs=LogStore(tmp_path / "logs"),
        monotonic=mono,
    )
    passes = 0
    handle = svc.ctrl.handle

    def timed(now: float, *events: Any, schedule: bool = True) -> list[Any]:
        nonlocal passes
        if schedule and not events:  # the turn's pass
            passes += 1
            mono.t += mono.cost
        return handle(now, *events, schedule=schedule)

    svc.ctrl.handle = timed  # type: ignore[method-assign]
    spec = JobSpec("one", "alice", "default", gpus_per_worker=1)

    async def run() -> int:
        await svc.start()
        try:
            turns = svc.turns
            for _ in range(6):
                await svc.submit([NewJob(spec)], SubmitAudit("alice", "user", 1, "one"))
            return svc.turns - turns
        finally:
            await svc.stop()

    try:
        return asyncio.run(run()), passes
    finally:
        store.close()


def test_a_cheap_pass_runs_every_turn_a_slow_one_waits_three_times_its_cost(
    db_url: str, tmp_path: Path
) -> None:
    turns, passes = passes_per_turn(db_url, tmp_path / "cheap", cost=0.001)
    assert passes >= 6 and passes >= turns - 1  # an idle cluster: each change at once
    turns, passes = passes_per_turn(db_url, tmp_path / "slow", cost=0.5)
    # the first pass cost 0.5 s and the clock stood still after it: no second pass
    # for a mere change until 1.5 s more have passed (the tick would still schedule)
    assert turns >= 6 and passes == 1
