"""The core learns, live and in the simulator alike, how long jobs run (the run-time predictor)
and how far their estimated starts were off (the 80 % band), as jobs end and start."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, profile, spec

from gpufleet.sim.engine import Simulation, TraceJob


def test_the_simulator_learns_run_times_and_how_its_estimates_came_out() -> None:
    # one GPU; three jobs at t=0 of 100 s each (limit 400 s: the history learns they use 1/4)
    jobs = [
        TraceJob(x, spec(x, limit=400.0), 0.0, 100.0, checkpoint_interval_s=None) for x in "abc"
    ]
    sim = Simulation(cluster_spec(1, 1), replace(profile(), explain=True), jobs)
    sim.run(until=0.0)
    reasons = sim.controller.last.reasons  # type: ignore[union-attr]
    # nothing learned yet: the plan holds each job for its limit
    assert reasons["b"].estimated_start == 400.0 and reasons["b"].start_low is None
    assert reasons["c"].estimated_start == 800.0
    sim.run()
    state = sim.controller.state
    assert state.history.recorded == 3
    q = state.history.predict(spec("d", limit=800.0))
    assert q is not None and q.basis == "limit"  # three samples: fewer than a history needs
    assert state.start_errors.learned == 2  # b and c were told an estimate, then started
    assert [sim.outcomes[x].first_start for x in "bc"] == [100.0, 200.0]
