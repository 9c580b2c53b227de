"""Advance reservations in the cycle (Slurm's ``scontrol create reservation flags=maint``): one
pure step over a snapshot that carries them, the time in the snapshot."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job, profile, running, snapshot

from gpufleet.model.reason import ReasonCode
from gpufleet.model.reservation import NodeReservation
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.snapshot import PendingJob, RunningJob

H = 3600.0
NOW = 0.0
# 02:00 on the first day of the Clock's epoch, for the message's time of day
MAINT = NodeReservation("maint", ("n02", "n03"), 2 * H, 6 * H, users=("root",), maint=True)


def step(
    pending: list[PendingJob],
    *,
    reservations: tuple[NodeReservation, ...] = (MAINT,),
    now: float = NOW,
    run: tuple[RunningJob, ...] = (),
    nodes: int = 4,
) -> CycleResult:
    snap = replace(snapshot(cluster(nodes, 8), pending, run, now=now), reservations=reservations)
    return run_cycle(snap, profile())


def nodes_of(res: CycleResult, job_id: str) -> set[str]:
    return {p.node for s in res.starts if s.job_id == job_id for p in s.allocation}


def test_a_job_whose_limit_crosses_the_window_keeps_off_its_nodes() -> None:
    # four 8-GPU jobs of 8 h: two fit on n00, n01; the two others would cross 02:00 on n02, n03
    jobs = [job(f"j{i}", gpus=8, submit=i, limit=8 * H) for i in range(4)]
    res = step(jobs)
    started = {p.node for s in res.starts for p in s.allocation}
    assert started == {"n00", "n01"}
    why = res.reasons["j2"]
    assert why.code is ReasonCode.RESV_MAINT
    assert why.message == (
        "n[02-03] reserved for maintenance from 02:00 UTC (in 2h 00m); "
        "your 8h 00m time limit would cross it"
    )
    assert why.estimated_start == 6 * H  # when the window ends


def test_backfill_fills_the_gap_before_the_window_with_jobs_that_end_in_time() -> None:
    short = job("short", gpus=8, submit=0, limit=1 * H)  # ends at 01:00, before 02:00
    exact = job("exact", gpus=8, submit=1, limit=2 * H)  # ends at 02:00 sharp: in time
    long = job("long", gpus=8, submit=2, limit=3 * H)
    res = step([short, exact, long], nodes=2, reservations=(replace(MAINT, nodes=("n00", "n01")),))
    assert sorted(res.started_ids) == ["exact", "short"]
    assert res.reasons["long"].code is ReasonCode.RESV_MAINT


def test_a_job_without_a_time_limit_never_starts_on_nodes_of_a_coming_window() -> None:
    res = step([job("forever", gpus=8, workers=3)])
    assert res.started_ids == []
    why = res.reasons["forever"]
    assert why.code is ReasonCode.RESV_MAINT
    assert "no time limit, so it would cross it" in why.message


def test_no_job_starts_on_the_nodes_while_the_window_is_active() -> None:
    res = step([job("a", gpus=8, workers=3, limit=H)], now=3 * H)
    assert res.started_ids == []
    why = res.reasons["a"]
    assert why.code is ReasonCode.RESV_MAINT
    assert "until 06:00 UTC (3h 00m more)" in why.message
    # after the window the nodes are everyone's again
    later = step([job("a", gpus=8, workers=3, limit=H)], now=6 * H)
    assert later.started_ids == ["a"]


def test_a_reservations_user_runs_inside_it_and_only_on_its_nodes() -> None:
    mine = job("mine", gpus=8, user="root", limit=8 * H)
    mine = replace(mine, spec=replace(mine.spec, reservation="maint"))
    res = step([mine], now=2 * H)
    assert nodes_of(res, "mine") <= {"n02", "n03"} and res.started_ids == ["mine"]
    # before the window opens it waits for it, and says when it opens
    early = step([mine], now=H)
    assert early.started_ids == []
    why = early.reasons["mine"]
    assert why.code is ReasonCode.RESV_WAIT
    assert why.estimated_start == 2 * H
    assert "waiting for reservation maint to start at 02:00 UTC (in 1h 00m)" in why.message


def test_a_job_in_a_reservation_does_not_spill_onto_other_nodes() -> None:
    jobs = []
    for i in range(3):
        j = job(f"m{i}", gpus=8, user="root", submit=i, limit=H)
        jobs.append(replace(j, spec=replace(j.spec, reservation="maint")))
    res = step(jobs, now=2 * H)
    assert sorted(res.started_ids) == ["m0", "m1"]
    assert {p.node for s in res.starts for p in s.allocation} == {"n02", "n03"}


def test_a_job_asking_for_a_reservation_that_is_gone_or_not_its_own_never_starts() -> None:
    theirs = job("theirs", gpus=1, user="alice", limit=H)
    theirs = replace(theirs, spec=replace(theirs.spec, reservation="maint"))
    res = step([theirs], now=2 * H)
    assert res.reasons["theirs"].code is ReasonCode.NEVER
    assert "not for user alice" in res.reasons["theirs"].message
    gone = step([theirs], now=2 * H, reservations=())
    assert gone.reasons["theirs"].message == "reservation maint no longer exists"


def test_a_job_that_fits_elsewhere_is_not_told_of_the_window() -> None:
    # the reserved nodes are not what it waits for: the rest of the cluster is busy
    busy = (running("r0", ("n00", range(8)), limit=10 * H),)
    res = step([job("a", gpus=8, workers=2, limit=8 * H)], run=busy)
    assert res.started_ids == []
    assert res.reasons["a"].code is ReasonCode.RESV_MAINT  # n01 free, n02-n03 reserved
    res = step([job("b", gpus=8, workers=2, limit=H)], run=busy)
    assert res.started_ids == ["b"]  # ends before 02:00: may use the reserved nodes


def test_a_reservation_that_is_not_maintenance_names_itself() -> None:
    other = NodeReservation("train", ("n00", "n01", "n02", "n03"), 2 * H, 4 * H, users=("bob",))
    res = step([job("a", gpus=1, limit=3 * H)], reservations=(other,))
    why = res.reasons["a"]
    assert why.code is ReasonCode.RESV_NODES
    assert why.message.startswith("n[00-03] reserved for reservation train from 02:00 UTC")


def test_without_reservations_nothing_changes() -> None:
    jobs = [job(f"j{i}", gpus=8, submit=i) for i in range(4)]
    assert sorted(step(jobs, reservations=()).started_ids) == ["j0", "j1", "j2", "j3"]


def test_the_core_keeps_reservations_and_schedules_when_a_window_closes() -> None:
    """Through the Driver, as live and simulated clusters run it: a pass runs when the window
    closes (a timer the core sets), with no other event."""
    from builders import cluster_spec
    from builders import spec as job_spec

    from gpufleet.core.controller import Controller
    from gpufleet.core.driver import Driver
    from gpufleet.core.events import JobSubmitted, ReservationRemoved, ReservationSet

    class Keep:
        def __init__(self) -> None:
            self.cmds: list[object] = []

        def apply(self, commands: list[object]) -> None:
            self.cmds += commands

    core = Controller(profile(), cluster_spec(2, 8))
    ex = Keep()
    d = Driver(core, ex)  # type: ignore[arg-type]
    both = NodeReservation("m", ("n00", "n01"), 10.0, 100.0, maint=True)
    d.step(0.0, [ReservationSet(both), JobSubmitted("a", job_spec("a", gpus=8), 0.0)])
    assert core.jobs["a"].job.state.value == "PENDING"
    assert core.reason("a").code is ReasonCode.RESV_MAINT  # type: ignore[attr-defined]
    assert d.due() == 10.0
    d.step(10.0)
    assert d.due() == 100.0
    d.step(100.0)  # the window closed: the job starts with no other event
    assert core.jobs["a"].job.state.value == "STARTING"
    # a removed reservation is gone from the next snapshot
    d.step(101.0, [ReservationSet(replace(both, name="n", start=200.0, end=300.0))])
    d.step(102.0, [ReservationRemoved("n")])
    assert core.snapshot(102.0).reservations == ()


def test_the_cheap_copy_of_a_spec_is_replace() -> None:
    from gpufleet.scheduler.reservations import with_exclude

    s = job("a", gpus=2, limit=H).spec
    assert with_exclude(s, ("n01", "n02")) == replace(s, exclude=("n01", "n02"))
