"""The controller service's group commit: submissions that share a turn (one transaction)
keep what each asked for. Driven in-process on a real store (SQLite and PostgreSQL), the
service's own loop on asyncio, time from a ManualClock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gpufleet.base.clock import ManualClock
from gpufleet.model.job import JobSpec
from gpufleet.scheduler.framework import Profile
from gpufleet.server.logs import LogStore
from gpufleet.server.service import ControllerService, RequestError
from gpufleet.server.store import NewJob, Store, SubmitAudit

pytestmark = pytest.mark.both_stores  # the store's contract: SQLite and PostgreSQL

T0 = 1_700_000_000.0


def array(name: str, n: int) -> list[NewJob]:
    spec = JobSpec(name, "alice", "default", gpus_per_worker=1)
    return [NewJob(spec, array_index=i) for i in range(n)]


def test_two_arrays_submitted_in_one_turn_are_two_arrays(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    svc = ControllerService(
        store,
        Profile.build(),
        ManualClock(T0),
        logs=LogStore(tmp_path / "logs"),
        min_pass_gap_s=0.0,  # the clock stands still: no gap to wait between passes
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
        store,
        Profile.build(),
        ManualClock(T0),
        logs=LogStore(tmp_path / "logs"),
        min_pass_gap_s=0.0,  # the clock stands still: no gap to wait between passes
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


def passes_per_turn(
    db_url: str, tmp_path: Path, gap: float, advance: float
) -> tuple[int, int, int]:
    """Submissions in 6 turns of their own, the Clock moved ``advance`` s before each: how many
    turns ran, how many scheduling passes, and how many of them on a mere change."""
    store = Store.open(db_url)
    clock = ManualClock(T0)  # never reaches the interval's tick (5 s) unless moved there
    svc = ControllerService(
        store, Profile.build(), clock, logs=LogStore(tmp_path / "logs"), min_pass_gap_s=gap
    )
    spec = JobSpec("one", "alice", "default", gpus_per_worker=1)

    async def run() -> tuple[int, int]:
        await svc.start()
        try:
            turns, cycles = svc.turns, svc.ctrl.cycle
            for _ in range(6):
                clock.advance(advance)
                (job,) = await svc.submit([NewJob(spec)], SubmitAudit("alice", "user", 1, "one"))
                # answered once stored; the turn's step (and its pass) follows the answer
                await svc.until_held(job)
            return svc.turns - turns, svc.ctrl.cycle - cycles
        finally:
            await svc.stop()

    try:
        turns, passes = asyncio.run(run())
        return turns, passes, svc.driver.steps
    finally:
        store.close()


def test_passes_follow_the_pass_rule_on_the_clock_not_the_cpu(db_url: str, tmp_path: Path) -> None:
    """The driver's rule (``PassRule``): a change is scheduled at once unless the last pass
    was less than the gap ago on the Clock; how long a pass took does not matter, so the
    simulator, which shares the rule, schedules at the same moments."""
    # the Clock stands still: the first change is scheduled, the next five wait for the gap
    turns, passes, _ = passes_per_turn(db_url, tmp_path / "still", gap=0.5, advance=0.0)
    assert turns >= 6 and passes == 1
    # the Clock moves a gap's worth before each change: every change is scheduled at once
    turns, passes, _ = passes_per_turn(db_url, tmp_path / "moving", gap=0.5, advance=0.5)
    assert turns >= 6 and passes == 6
    # no gap: every turn with a change schedules, as the simulator does by default
    turns, passes, _ = passes_per_turn(db_url, tmp_path / "none", gap=0.0, advance=0.0)
    assert passes == 6


def test_requests_naming_a_just_answered_job_wait_until_the_core_holds_it(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A submission is answered once stored, before its turn's step gives it to the core: a
    dependent submission and a cancel sent right after the answer act on the job as the core
    holds it (the dependency is not read from the store as an ended job's)."""
    store = Store.open(db_url)
    svc = ControllerService(
        store,
        Profile.build(),
        ManualClock(T0),
        logs=LogStore(tmp_path / "logs"),
        min_pass_gap_s=0.0,
    )
    spec = JobSpec("first", "alice", "default", gpus_per_worker=1)
    audit = SubmitAudit("alice", "user", 1, "first")

    async def run() -> tuple[bool, bool, str, str, Any]:
        await svc.start()
        try:
            (a,) = await svc.submit([NewJob(spec)], audit)
            stored_only = svc.job(a) is None and store.job(a) is not None
            (b,) = await svc.submit([NewJob(spec, depends_on=(("afterok", a),))], audit)
            held = svc.job(a) is not None
            await svc.cancel(a, "cancelled by alice")
            await svc.until_held(b)
            rec_a, rec_b = svc.job(a), svc.job(b)
            assert rec_a is not None and rec_b is not None
            return stored_only, held, rec_a.job.state.value, rec_b.job.state.value, rec_b
        finally:
            await svc.stop()

    try:
        stored_only, held, state_a, state_b, rec_b = asyncio.run(run())
        assert stored_only  # answered after the acceptance commit, before the step
        assert held  # the dependent submission waited for the step
        # not read from the store into the core ahead of its own JobSubmitted (which the core
        # would then refuse as a duplicate)
        assert not [r for r in caplog.records if "refused by the core" in r.getMessage()]
        assert state_a == "CANCELLED"
        # as when the job was held at the answer: the dependent's dependency can never be met,
        # and it waits so (Slurm's default, ADR 0072) until its user cancels it
        assert state_b == "PENDING" and rec_b.depends_on == (("afterok", "1"),)
        assert [h[2] for h in rec_b.job.history] == ["submitted"]
    finally:
        store.close()


def test_a_job_whose_dependency_can_never_be_met_is_read_back_pending_so(
    db_url: str, tmp_path: Path
) -> None:
    """A restarted controller holds such a job pending with the same Reason: its dependency,
    ended, is read back with it (``rs.dependencies``)."""
    spec = JobSpec("first", "alice", "default", gpus_per_worker=1)
    audit = SubmitAudit("alice", "user", 1, "first")

    def service(store: Store) -> ControllerService:
        return ControllerService(
            store,
            Profile.build(),
            ManualClock(T0),
            logs=LogStore(tmp_path / "logs"),
            min_pass_gap_s=0.0,
        )

    async def run(store: Store, first: bool) -> tuple[str, str, str]:
        svc = service(store)
        await svc.start()
        try:
            if first:
                (a,) = await svc.submit([NewJob(spec)], audit)
                (b,) = await svc.submit([NewJob(spec, depends_on=(("afterok", a),))], audit)
                await svc.cancel(a, "cancelled by alice")
                await svc.until_held(b)
            for _ in range(200):  # the first pass after the start gives the Reasons
                if (why := svc.reason("2")) is not None:
                    break
                await asyncio.sleep(0.025)
            rec = svc.job("2")
            assert rec is not None and why is not None
            return rec.job.state.value, why.code.value, why.message
        finally:
            await svc.stop()

    store = Store.open(db_url)
    try:
        before = asyncio.run(run(store, True))
    finally:
        store.close()
    store = Store.open(db_url)
    try:
        after = asyncio.run(run(store, False))
    finally:
        store.close()
    never = ("PENDING", "DependencyNeverSatisfied", "dependency afterok:1 ended CANCELLED")
    assert before == after == (*never[:2], f"{never[2]}: it can never be met")
