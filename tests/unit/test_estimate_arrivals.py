"""The start plan's forecast of arrivals (``scheduler/arrivals``, ``Profile.plan_arrivals``):
the jobs submitted over the last window come again in the windows after the cycle, take their
turn under fair share ahead of a queue that has used more, and are not planned themselves."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, cluster_spec, job, profile, running, snapshot, spec

from gpufleet.scheduler.arrivals import ArrivalHistory
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.sim.engine import Simulation, TraceJob


def test_the_history_keeps_the_last_window_in_time_order() -> None:
    h = ArrivalHistory(window_s=100.0)
    for t in (0.0, 50.0, 30.0, 120.0):  # 30 comes late: put in its place
        h.arrived(spec(f"j{t:g}"), t)
    assert len(h) == 3  # 0 is more than a window before 120
    assert [t for t, _ in h.recent(120.0)] == [30.0, 50.0, 120.0]
    assert [t for t, _ in h.recent(100.0)] == [30.0, 50.0]  # nothing after the cycle
    assert [s.name for _, s in h.recent(140.0)] == ["j50", "j120"]  # (40, 140]


def _fair(arrivals: ArrivalHistory | None, on: bool) -> float | None:
    """One GPU, held by queue a until 100; a1 holds EASY's reservation then (to 200); a2 (queue
    a, which has used much) waits behind it."""
    busy = [running("a0", ("n00", [0]), queue="a", limit=100.0)]
    pending = [job("a1", queue="a", limit=100.0), job("a2", submit=1, queue="a", limit=100.0)]
    snap = replace(snapshot(cluster(1, 1), pending, busy, usage={"a": 1e6}), arrivals=arrivals)
    res = run_cycle(snap, replace(profile(order="fairshare"), plan_arrivals=on))
    assert "~1.0" not in res.reasons  # what is forecast is not planned nor told
    assert res.reasons["a1"].start_bound == "reserved"
    return res.reasons["a2"].estimated_start


def test_a_job_forecast_of_a_queue_that_used_less_goes_ahead_under_fair_share() -> None:
    h = ArrivalHistory(window_s=1000.0)
    h.arrived(spec("b0", queue="b", limit=300.0), -950.0)  # again at 50, for 300 s
    assert _fair(h, on=False) == 200.0  # only the pending jobs: a2 after a1
    assert _fair(h, on=True) == 500.0  # b's job comes at 50 and goes first at 200
    assert _fair(None, on=True) == 200.0  # nothing recorded: nothing forecast
    late = ArrivalHistory(window_s=1000.0)
    late.arrived(spec("b0", queue="b", limit=300.0), -750.0)  # again at 250: after a2 began
    assert _fair(late, on=True) == 200.0


def test_the_core_records_each_submitted_job_in_the_simulator_too() -> None:
    jobs = [TraceJob(x, spec(x, limit=10.0), t, 10.0) for x, t in (("a", 0.0), ("b", 5.0))]
    sim = Simulation(cluster_spec(1, 1), replace(profile(), plan_arrivals=True), jobs)
    sim.run()
    assert [t for t, _ in sim.controller.state.arrivals.recent(5.0)] == [0.0, 5.0]
    # where no plan forecasts arrivals, none is kept (6 h of a busy cluster's specs)
    off = Simulation(cluster_spec(1, 1), profile(), jobs)
    off.run()
    assert len(off.controller.state.arrivals) == 0
